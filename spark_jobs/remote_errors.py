"""Exceptions Spark itself raises around a drain, outside kprio's drain task, typed once where they are caught.

A drain task never raises to Spark: its failures come back in its stats rows as typed records
(:class:`kprio_core.model.results.ErrorRecord`). These still arrive as Spark's own exceptions, and are
typed here, at the one boundary that catches them:

- **a failed read stage of the key-order shuffle** (:func:`failures_in`): Spark wraps the reader's kprio
  error keeping only the traceback's text, so the reader attaches its ErrorRecord (range as a field) as one
  note, ``kprio.failure`` + JSON (:func:`note_failure`); the driver decodes that note and nothing else;
- **Spark gone** (:func:`spark_unavailable`): Connect server stopped or restarted, session closed, context
  stopped, JVM gateway lost; typed where py4j and gRPC allow (``Py4JNetworkError``, gRPC ``UNAVAILABLE``,
  ``SESSION_CLOSED``, a refused connection); a context shut down under a running job only by its words;
- **the native reader's Kafka client refused** (:func:`java_security_failure`): wrong password,
  untrusted certificate, as kprio's security errors;
- **a job Spark aborted** (:func:`job_aborted`): a task failed outside the drain task (Python worker died,
  executor lost, out of memory); the cause is Spark's "Job aborted due to stage failure" line, not the
  ``Py4JJavaError``'s first line: a :class:`~kprio_core.errors.SparkJobFailed`.

>>> from kprio_core.errors import RangeIncomplete
>>> from kprio_core.model.offsets import OffsetRange
>>> read = note_failure(RangeIncomplete("range t[0]@[0,5) is incomplete"), OffsetRange("t", 0, 0, 5))
>>> spark_text = f"Traceback (most recent call last):\\n...\\n{type(read).__name__}: {read}\\n{read.__notes__[0]}\\n"
>>> [record] = failures_in(RuntimeError(spark_text))
>>> record.kind, record.message, str(record.where)
('RangeIncomplete', 'range t[0]@[0,5) is incomplete', 't[0]@[0,5)')
>>> type(kprio_error_in(RuntimeError(spark_text))).__name__, failures_in(RuntimeError("boom"))
('RangeIncomplete', ())
>>> type(spark_unavailable(ConnectionRefusedError(111, "Connection refused"))).__name__
'SparkUnavailable'
>>> spark_unavailable(ValueError("a plan bug")) is None
True
>>> text = ("An error occurred while calling o95.collectToPython.\\n: org.apache.spark.SparkException: Job aborted due "
...         "to stage failure: Task 1 in stage 0.0 failed 1 times, most recent failure: Lost task 1.0 in stage 0.0 "
...         "(TID 1) (host executor driver): org.apache.spark.SparkException: Python worker exited unexpectedly "
...         "(crashed). Consider setting 'spark.python.worker.faulthandler.enabled'\\n\\tat org.apache...")
>>> print(job_aborted(RuntimeError(text)))
the Spark job of the drain was aborted: Task 1 in stage 0.0 failed 1 times, most recent failure: Lost task 1.0 in stage 0.0 (TID 1) (host executor driver): org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator

from kprio_core import errors
from kprio_core.config import KafkaSettings
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import ErrorRecord

FAILURE_NOTE = "kprio.failure "
"""The note a reader's failure carries across a Spark stage: this marker, then its ErrorRecord as JSON."""

_GONE_CONDITIONS = ("INVALID_HANDLE.SESSION_CLOSED", "INVALID_HANDLE.SESSION_NOT_FOUND")
_GONE_WORDS = ("SparkContext was shut down", "SparkContext has been shutdown")
"""How a classic context stopped under a running job is said: Spark gives it no type of its own."""


def note_failure(err: BaseException, where: OffsetRange | None) -> BaseException:
    """Attach ``err``'s :class:`~kprio_core.model.results.ErrorRecord` (reading ``where``) to it as its one failure note.

    Done on the executor, so it travels with the traceback; the message is unchanged, an existing note kept.
    """
    notes = getattr(err, "__notes__", ())
    if not any(note.startswith(FAILURE_NOTE) for note in notes):
        err.add_note(FAILURE_NOTE + ErrorRecord.of(err, where=where).to_json())
    return err


def failures_in(exc: BaseException) -> tuple[ErrorRecord, ...]:
    """The failure records (:func:`note_failure`) in a failed Spark stage's text, each once, in order."""
    text, decoder = str(exc), json.JSONDecoder()
    found: dict[ErrorRecord, None] = {}
    at = text.find(FAILURE_NOTE)
    while at >= 0:
        start = at + len(FAILURE_NOTE)
        try:
            payload, end = decoder.raw_decode(text, start)
            found.setdefault(ErrorRecord.from_json(payload))
        except ValueError:  # a note cut short (a truncated message): not a record
            end = start
        at = text.find(FAILURE_NOTE, end)
    return tuple(found)


def kprio_error_in(exc: BaseException) -> errors.KprioError | None:
    """The kprio error of the last failure record in a failed Spark read stage (same type and message), or None."""
    found = failures_in(exc)
    return found[-1].error() if found else None


def spark_unavailable(exc: BaseException) -> errors.SparkUnavailable | None:
    """SparkUnavailable when ``exc`` says Spark itself went away (see the module docstring), else None."""
    if isinstance(exc, errors.KprioError):
        return None
    if isinstance(exc, ConnectionError) or _gone(exc):
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return errors.SparkUnavailable(f"Spark is not available: {type(exc).__name__}: {first}")
    return None


_ABORTED = re.compile(r"Job aborted due to stage failure: (?P<cause>[^\n]+)")


def job_aborted(exc: BaseException) -> errors.SparkJobFailed | None:
    """SparkJobFailed with Spark's own cause when ``exc`` is a job Spark aborted (see the module docstring), else None."""
    if isinstance(exc, errors.KprioError):
        return None
    found = _ABORTED.search(str(exc))
    if found is None:
        return None
    cause = found["cause"].split(" Consider setting ", 1)[0].rstrip(". ")
    return errors.SparkJobFailed(f"the Spark job of the drain was aborted: {cause}")


def _gone(exc: BaseException) -> bool:
    try:
        from py4j.protocol import Py4JNetworkError
    except ImportError:  # a Spark Connect client has no py4j
        Py4JNetworkError = ()  # noqa: N806
    if Py4JNetworkError and isinstance(exc, Py4JNetworkError):
        return True
    status = getattr(exc, "getGrpcStatusCode", None)
    if status is not None and getattr(status(), "name", "") == "UNAVAILABLE":
        return True
    condition = getattr(exc, "getCondition", None)
    if condition is not None and (condition() or "") in _GONE_CONDITIONS:
        return True
    return any(words in str(exc) for words in _GONE_WORDS)


@contextlib.contextmanager
def spark_boundary(kafka: KafkaSettings | None = None) -> Iterator[None]:
    """Run Spark calls, typing Spark's exceptions (module docstring); with ``kafka`` (the native reader's
    settings) a Java client timeout too (:func:`java_timeout`); anything else passes as is."""
    try:
        yield
    except Exception as exc:
        typed = (spark_unavailable(exc) or java_security_failure(exc)
                 or (java_timeout(exc, kafka) if kafka is not None else None) or job_aborted(exc))
        if typed is None:
            raise
        raise typed from exc


_JAVA_TIMEOUT = re.compile(r"org\.apache\.kafka\.common\.errors\.TimeoutException: ([^\n]+)")


def java_timeout(exc: BaseException, kafka: KafkaSettings) -> errors.KprioError | None:
    """The native reader's Java client timed out (no broker answered), typed; None when ``exc`` is no such timeout.

    A kprio admin client of the same settings asks why (:func:`kprio_core.kafka.client.refusal`): a security
    failure, else BrokerUnreachable (transient)."""
    if isinstance(exc, errors.KprioError):
        return None
    found = _JAVA_TIMEOUT.search(str(exc))
    if found is None:
        return None
    from kprio_core.kafka.client import refusal

    why = refusal(kafka.client_config(), kafka.timeout_s)
    if isinstance(why, errors.KafkaSecurityFailed):
        return why
    return errors.BrokerUnreachable(kafka.bootstrap_servers, kafka.timeout_s,
                                    f"spark.reader native: Kafka's Java client: {found.group(1).strip()}")


def java_security_failure(exc: BaseException) -> errors.KafkaSecurityFailed | None:
    """The native reader's Kafka Java client refused by the broker (or refusing its certificate), typed
    (:func:`kprio_core.kafka.security.java_security_failure`), else None."""
    if isinstance(exc, errors.KprioError):
        return None
    from kprio_core.kafka.security import java_security_failure as from_text

    return from_text(str(exc))
