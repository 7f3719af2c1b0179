"""Typed errors with a stable ``code`` tests can match and a message that says what and where; a failure whose
cause passes by itself is ``transient`` by its type, never its message (:func:`is_transient`).

>>> e = TopicMissing("orders-2", bootstrap="127.0.0.1:9092")
>>> e.code, e.transient
('topic_missing', False)
>>> str(e)
"topic 'orders-2' does not exist on 127.0.0.1:9092"
>>> import errno, os
>>> is_transient(BrokerUnreachable("b:9092", 5)), is_transient(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
(True, True)
>>> is_transient(HandlerError("handler 'h' answered 1 row for 2")), is_transient(ValueError("bad"))
(False, False)
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EMFILE})
"""OSError numbers of storage that cannot be written for now: someone fixes it, kprio retries."""


class KprioError(Exception):
    """Base of kprio's errors: a stable ``code``; ``where`` (setting, file or URL, never a secret) shown in parentheses.

    >>> str(ConfigError("Input should be a valid number", where="kafka.timeout_s in kprio.yaml"))
    'Input should be a valid number (kafka.timeout_s in kprio.yaml)'
    """

    code = "kprio_error"
    transient = False
    where: str | None = None
    setting: str | None = None
    """The configuration key the error is about when it has no ``where``; the CLI names where it was set."""
    setting_value: str | None = None
    """The value of :attr:`setting` the error met (never a secret's)."""
    shown: tuple[str, ...] = ()
    """Values the message may quote: a line for a person cuts a long one (:func:`shortened`)."""

    def __init__(self, *args: object, where: str | None = None, setting: str | None = None) -> None:
        super().__init__(*args)
        if where is not None:
            self.where = where
        if setting is not None:
            self.setting = setting

    @property
    def what(self) -> str:
        """The message without its ``where``."""
        return super().__str__()

    def __str__(self) -> str:
        return f"{self.what} ({self.where})" if self.where else self.what


def is_transient(err: BaseException) -> bool:
    """Whether a failure's cause passes by itself, by its type (and an OSError's number)."""
    if isinstance(err, KprioError):
        return err.transient
    if isinstance(err, ConnectionError | TimeoutError):
        return True
    if isinstance(err, OSError):
        return err.errno in TRANSIENT_ERRNOS
    return False


class ConfigError(KprioError):
    """The configuration file or an environment override is invalid."""

    code = "config_invalid"


class QuotaError(KprioError, ValueError):
    """A quota cannot be distributed as asked (budget too small for the priorities)."""

    code = "quota_invalid"


class BrokerUnreachable(KprioError):
    """No broker answered within the timeout."""

    code = "broker_unreachable"
    transient = True
    setting = "kafka.bootstrap_servers"

    def __init__(self, bootstrap: str, timeout_s: float, detail: str = "") -> None:
        self.bootstrap = self.setting_value = bootstrap
        self.timeout_s = timeout_s
        more = f": {detail}" if detail else ""
        super().__init__(f"no Kafka broker answered at {bootstrap} within {timeout_s:g} s{more}")


class TopicMissing(KprioError):
    """A priority topic does not exist."""

    code = "topic_missing"
    setting = "topics"

    def __init__(self, topic: str, bootstrap: str) -> None:
        self.topic = topic
        super().__init__(f"topic '{topic}' does not exist on {bootstrap}")


class PartitionCountMismatch(KprioError):
    """A priority topic has another partition count than the configuration expects."""

    code = "partition_count_mismatch"
    setting = "topics"

    def __init__(self, topic: str, expected: int, actual: int) -> None:
        self.topic, self.expected, self.actual = topic, expected, actual
        super().__init__(f"topic '{topic}' has {actual} partitions, the configuration expects {expected}")


class AuthorizationFailed(KprioError):
    """The broker refused an operation for lack of permission."""

    code = "authorization_failed"
    setting = "kafka.client"


class DataLostToRetention(KprioError):
    """Offsets that were never drained are gone from the log (below the log start offset)."""

    code = "data_lost_to_retention"


class RangeIncomplete(KprioError):
    """A planned offset range came back short or with gaps."""

    code = "range_incomplete"


class ReadStalled(RangeIncomplete):
    """A range read made no progress for the stall timeout (the partition's leader or the cluster away)."""

    transient = True


class RangeConflict(KprioError):
    """A plan asks for offsets that a batch in flight already holds."""

    code = "range_conflict"


class BatchNotFound(KprioError):
    """The ledger has no batch of that id."""

    code = "batch_not_found"


class InvalidTransition(KprioError):
    """A batch cannot move from its current state to the one asked."""

    code = "invalid_transition"


class BatchSuperseded(KprioError):
    """A batch was planned on an earlier incarnation of one of its partitions: it never runs again."""

    code = "batch_superseded"


class DrainStatsInvalid(KprioError, ValueError):
    """The per-range stats handed to the ledger for a drained batch are malformed."""

    code = "drain_stats_invalid"


class HandlerError(KprioError):
    """The configured record handler cannot be loaded or broke its contract."""

    code = "handler_invalid"


class TraceInvalid(KprioError, ValueError):
    """A simulator trace (built-in name or JSON trace file) is unknown or malformed."""

    code = "trace_invalid"


class PolicyBroke(KprioError):
    """A simulated drain policy drained records that were not there (more than a partition's backlog)."""

    code = "policy_broke"


class KafkaOperationFailed(KprioError):
    """A Kafka client call failed for a reason none of the more specific errors covers."""

    code = "kafka_operation_failed"
    setting = "kafka.bootstrap_servers"


class LogChanged(KprioError):
    """A batch's topic was deleted or recreated while in flight: it publishes and commits nothing; a reset decides."""

    code = "log_changed"


class KafkaSecurityFailed(KprioError):
    """The cluster refused kprio's client, or kprio its certificate: a setting to fix (named, never a secret)."""

    code = "kafka_security_failed"
    setting = "kafka.client"


class SaslAuthenticationFailed(KafkaSecurityFailed):
    """The broker refused the SASL user name or password (a wrong password, an unknown user)."""

    code = "sasl_authentication_failed"


class SaslMechanismNotEnabled(KafkaSecurityFailed):
    """The SASL mechanism the client asks for is not enabled on the broker's listener."""

    code = "sasl_mechanism_not_enabled"


class CertificateUntrusted(KafkaSecurityFailed):
    """The broker's TLS certificate is not signed by a CA the client trusts (``ssl.ca.location``)."""

    code = "ssl_certificate_untrusted"


class CertificateExpired(KafkaSecurityFailed):
    """A TLS certificate (the broker's, or the client's that the broker refused) is expired or not yet valid."""

    code = "ssl_certificate_expired"


class HostnameMismatch(KafkaSecurityFailed):
    """The broker's TLS certificate does not name the host the client connected to."""

    code = "ssl_hostname_mismatch"


class ClientCertificateRejected(KafkaSecurityFailed):
    """The broker requires a client certificate (mutual TLS) and refused the one sent, or got none."""

    code = "ssl_client_certificate_rejected"


class TlsHandshakeFailed(KafkaSecurityFailed):
    """The TLS handshake with the broker failed for a reason none of the kinds above covers."""

    code = "ssl_handshake_failed"


class SecurityProtocolMismatch(KafkaSecurityFailed):
    """The listener speaks another protocol than ``kafka.client.security.protocol`` (probed: the broker just closes)."""

    code = "security_protocol_mismatch"


class LaneOrderBroken(KprioError):
    """Records of one lane reached the handler out of offset order (a drain bug, never data)."""

    code = "lane_order_broken"


class DrainOutputInvalid(KprioError):
    """The drained output does not match its plan: records outside the planned ranges, or twice."""

    code = "drain_output_invalid"


class OutputPublishFailed(KprioError):
    """A staged drain output could not be moved into place."""

    code = "output_publish_failed"


class BatchBusy(KprioError):
    """Another run holds a live lease on the batch (it is being worked on)."""

    code = "batch_busy"


class LeaseLost(KprioError):
    """A run's lease on a batch is gone (expired and taken over, retried, or the batch left flight)."""

    code = "lease_lost"
    transient = True


class LedgerSchemaOutdated(KprioError):
    """The ledger database was written by another kprio schema version than this one reads."""

    code = "ledger_schema_outdated"


class LedgerNotFresh(KprioError):
    """An operation that only a ledger without batches allows (renumbering) came too late."""

    code = "ledger_not_fresh"


class MaintenanceFailed(KprioError):
    """A table's maintenance failed: the table and the cause; no row changed (each step is its own transaction)."""

    code = "maintenance_failed"


class OutputUnavailable(KprioError):
    """An output or dead-letter root cannot be written (read-only, full, missing permission): path and cause."""

    code = "output_unavailable"
    transient = True


class SparkUnavailable(KprioError):
    """Spark itself went away under a drain: a Spark Connect server gone or restarted, a stopped context."""

    code = "spark_unavailable"
    transient = True


class SparkJobFailed(KprioError):
    """Spark aborted a drain's job outside kprio's drain task (a worker died, memory ran out): Spark's cause."""

    code = "spark_job_failed"


class TaskFailed(KprioError):
    """A drain task raised an exception that is not kprio's (a handler's own error, a library's): type and message."""

    code = "task_failed"


class UsageError(KprioError):
    """The command line itself is wrong. The CLI exits 2 for it (every other error exits 1)."""

    code = "usage"


class PathUnusable(KprioError):
    """A file or directory kprio was told to use cannot be used; transient for :data:`TRANSIENT_ERRNOS`.

    >>> import errno
    >>> err = PathUnusable.of(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/etc/hosts/x"), "--data-dir")
    >>> str(err), err.transient
    ("cannot use '/etc/hosts/x': a part of it is a file, not a directory (--data-dir)", False)
    """

    code = "path_unusable"

    @classmethod
    def of(cls, err: OSError, setting: str, path: object | None = None, doing: str = "use") -> PathUnusable:
        """The error for an OSError met while ``doing`` something with the path a setting names."""
        where = err.filename if err.filename is not None else path
        made = cls(f"cannot {doing} {str(where)!r}: {os_reason(err)}", where=setting)
        made.transient = err.errno in TRANSIENT_ERRNOS
        return made


_REASONS = {
    errno.ENOTDIR: "a part of it is a file, not a directory",
    errno.EISDIR: "it is a directory, not a file",
    errno.ENOENT: "no such file or directory",
    errno.EEXIST: "it exists already and is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
}


SHOWN_CHARACTERS = 120
"""The most characters of a wrong value an error line quotes; a longer one is cut, with its length."""


def shortened(message: str, texts: Iterable[object], keep: int = SHOWN_CHARACTERS) -> str:
    """``message`` with each long text of ``texts`` it quotes (a value, an argument) cut to its first ``keep``
    characters and its length: an error stays a readable line whatever was pasted. A path of a directory that
    exists stays whole: it is what the line must name.

    >>> shortened("spark.master: 'abcdefghij' is not a master", ["abcdefghij"], keep=4)
    "spark.master: 'abcd…' (10 characters) is not a master"
    >>> shortened("no port: abcdefghij", ["abcdefghij", 5], keep=4), shortened("x: 'abc' is bad", ["abc"], keep=4)
    ('no port: abcd… (10 characters)', "x: 'abc' is bad")
    >>> shortened("cannot read /tmp/kprio.yaml", ["/tmp/kprio.yaml"], keep=4)
    'cannot read /tmp/kprio.yaml'
    """
    for text in sorted({t for t in texts if isinstance(t, str) and len(t) > keep and not _a_path(t)}, key=len,
                       reverse=True):
        quoted, cut = repr(text), repr(text[:keep])
        if quoted in message:
            message = message.replace(quoted, f"{cut[:-1]}…{cut[-1]} ({len(text):,} characters)")
        else:
            message = message.replace(text, f"{text[:keep]}… ({len(text):,} characters)")
    return message


def _a_path(text: str) -> bool:
    """Whether ``text`` names a path in a directory that exists (a name too long for the system names none)."""
    try:
        return os.sep in text and os.path.isdir(os.path.dirname(os.path.abspath(text)))
    except (OSError, ValueError):
        return False


def os_reason(err: OSError) -> str:
    """What an OSError says about its path, by its number (``os.strerror`` for the numbers not listed).

    >>> os_reason(IsADirectoryError(errno.EISDIR, "Is a directory"))
    'it is a directory, not a file'
    """
    if err.errno in _REASONS:
        return _REASONS[err.errno]
    return os.strerror(err.errno).lower() if err.errno else type(err).__name__


class LedgerUnavailable(KprioError):
    """The ledger database does not answer or refuses work for now (server down, SQLite file locked or full)."""

    code = "ledger_unavailable"
    transient = True


class LedgerUnusable(KprioError):
    """``ledger.url`` names no usable database (not SQLite, corrupt, a path SQLite cannot open)."""

    code = "ledger_unusable"


class FileExistsRefused(KprioError):
    """A file kprio would write exists and is not kprio's to replace (``--force`` replaces it)."""

    code = "file_exists"


class ToolFailed(KprioError):
    """An outside command kprio runs for the user (``airflow pools set``) is missing or failed."""

    code = "tool_failed"


class DeadLettersUnreadable(KprioError):
    """The published dead letters under ``drain.dead_letter_path`` cannot be read."""

    code = "dead_letters_unreadable"


class DrainStopped(KprioError):
    """``kprio drain`` or ``kprio retry`` stopped before its work was done (held partitions, a failed run)."""

    code = "drain_stopped"


class TopicsMismatch(KprioError):
    """The priority topics on the cluster differ from the configuration (``kprio topics verify``)."""

    code = "topics_mismatch"


class ResetRefused(KprioError):
    """``kprio reset`` cannot commit the offset asked for that partition."""

    code = "reset_refused"


class InternalError(KprioError):
    """An exception kprio did not expect (a bug): its type and first line; ``--debug`` shows the traceback."""

    code = "internal_error"


class SchemaRegistryUnavailable(KprioError):
    """The schema registry is unreachable or answers 5xx: the batch waits, no record becomes a dead letter."""

    code = "schema_registry_unavailable"
    transient = True


class SchemaRegistryRefused(KprioError):
    """The schema registry refuses kprio's requests (401, 403: credentials or TLS), or has no subject kprio needs."""

    code = "schema_registry_refused"


class SchemaIncompatible(KprioError):
    """A subject's new version changes a column the table already has in a way no reader can follow."""

    code = "schema_incompatible"
