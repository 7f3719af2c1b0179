"""Read one offset range ``[start, end)`` with confluent-kafka and yield Arrow record batches.

Runs on a Spark executor (or alone). Memory is bounded by the fetch limits and ``batch_records``, never by
the range's length: a batch is handed on every ``batch_records`` records.

The read never returns records at or beyond ``end`` and is complete once it passed ``end``
(:mod:`spark_jobs.completeness`): skipped offsets hold no record (transaction markers, aborted records,
compaction). It gives up when the position did not move for ``stall_timeout_s`` (renewed on progress): a
failure whatever ``allow_data_loss`` says. Offsets the log no longer holds are lost: without
``allow_data_loss`` :class:`~kprio_core.errors.RangeIncomplete` names them; with it the read goes on (logged)
and the caller's tracker carries the loss to the drain's stats.

A read's settings are one validated, frozen, picklable value, :class:`ReadSettings`, carried in the source's
one ``settings`` option: nothing parsed by hand, every default the one :mod:`kprio_core.config` writes.

>>> from kprio_core.config import KprioConfig, SparkSettings
>>> fetch_settings_conf(SparkSettings())["max.partition.fetch.bytes"]
4194304
>>> fetch_settings_conf(SparkSettings(fetch_max_bytes=4096, max_partition_fetch_bytes=2048))["message.max.bytes"]
4096
>>> settings = ReadSettings.of(KprioConfig(kafka={"timeout_s": 0.5}, spark={"arrow_batch_records": 7}))
>>> settings.spark.arrow_batch_records, settings.allow_data_loss, settings.stall_timeout_s
(7, False, 1.0)
>>> ReadSettings.of_option(settings.to_option()) == settings
True
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kprio_core.config import WITH_SECRETS, DrainSettings, KafkaSettings, KprioConfig, SparkSettings, config_error
from kprio_core.model.offsets import OffsetRange
from spark_jobs.completeness import RangeTracker, incomplete_error

LOGGER = logging.getLogger("kprio.reader")

POLL_SLICE_S = 0.1
"""Longest single consume() wait, so the stall deadline is checked this often; a range ending on
transaction markers waits one slice (consume returns only at its count or timeout, even at the end)."""


class ReadSettings(BaseModel):
    """What a range read needs besides the range: the sections of ``KprioConfig`` the executors use, as validated.

    No default of its own. Its repr and plain JSON mask the secrets; only :meth:`to_option` writes them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kafka: KafkaSettings = KafkaSettings()
    """The client settings (secrets included), the isolation level, and the stall bound (``timeout_s``)."""
    spark: SparkSettings = SparkSettings()
    """The fetch limits and the records per Arrow batch."""
    allow_data_loss: bool = DrainSettings.model_fields["allow_data_loss"].default
    """``drain.allow_data_loss``, or what the caller chose for one read: read on past a loss instead of failing."""

    @classmethod
    def of(cls, config: KprioConfig, *, allow_data_loss: bool | None = None) -> ReadSettings:
        """The read settings of ``config`` (``allow_data_loss``: None for ``drain.allow_data_loss``)."""
        loss = config.drain.allow_data_loss if allow_data_loss is None else allow_data_loss
        return cls(kafka=config.kafka, spark=config.spark, allow_data_loss=loss)

    def to_option(self) -> str:
        """The one data source option that carries these settings: JSON, secrets in clear (never log it)."""
        return self.model_dump_json(context={WITH_SECRETS: True})

    @classmethod
    def of_option(cls, text: str, where: str = "option 'settings'") -> ReadSettings:
        """The settings back from :meth:`to_option`; ConfigError naming the bad key (never its value) otherwise."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            raise config_error(err, where) from None

    def client(self) -> dict[str, str | int | float | bool]:
        """The librdkafka settings of the executors' consumers, secrets included (never log this)."""
        return self.kafka.consumer_config()

    @property
    def stall_timeout_s(self) -> float:
        """How long a range read waits without progress before it gives up: ``kafka.timeout_s``, at least 1 s."""
        return max(self.kafka.timeout_s, 1.0)

    @property
    def batch_records(self) -> int:
        return self.spark.arrow_batch_records


def fetch_settings_conf(spark: SparkSettings) -> dict[str, Any]:
    """librdkafka settings for the fetch limits (message.max.bytes may not exceed fetch.max.bytes)."""
    conf: dict[str, Any] = {
        "fetch.max.bytes": spark.fetch_max_bytes,
        "max.partition.fetch.bytes": spark.max_partition_fetch_bytes,
        "queued.max.messages.kbytes": spark.queued_max_messages_kbytes,
        "receive.message.max.bytes": max(100_000_000, spark.fetch_max_bytes + 512),
    }
    if spark.fetch_max_bytes < 1_000_000:
        conf["message.max.bytes"] = spark.fetch_max_bytes
    return conf


def consumer_conf(client: Mapping[str, Any], spark: SparkSettings) -> dict[str, Any]:
    """A throwaway, never-committing consumer that reports end of partition and offset-out-of-range."""
    conf = dict(client)
    conf.update(fetch_settings_conf(spark))
    conf.update(
        {
            # A fresh group id per read: the reader never joins or commits to a real group.
            "group.id": f"kprio-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # 'error' instead of a silent jump: a range below the log start must be seen as a gap.
            "auto.offset.reset": "error",
            "logger": LOGGER,
        }
    )
    return conf


class _Columns:
    """Column buffers of one Arrow batch, filled a consume() chunk at a time.

    Only GC-untracked objects (bytes, ints, arrays) outlive a chunk: thousands of tuples held until the
    batch is built made each collection traverse them, costing as much as the consume.
    """

    def __init__(self, headers_type: Any) -> None:
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.offset: list[int] = []
        self.stamp: list[Any] = []  # per chunk: int64 array of confluent-kafka's (type, ms) pairs
        self.headers: list[Any] = []  # per chunk: Arrow array
        self._headers_type = headers_type

    def __len__(self) -> int:
        return len(self.offset)

    def take(self, messages: list[Any]) -> list[int]:
        """Add a chunk of records (no error events): one pass per column, not per record."""
        import itertools

        import numpy as np
        import pyarrow as pa

        n = len(messages)
        offsets = [m.offset() for m in messages]
        self.offset += offsets
        self.key += [m.key() for m in messages]
        self.value += [m.value() for m in messages]
        pairs = itertools.chain.from_iterable(m.timestamp() for m in messages)
        self.stamp.append(np.fromiter(pairs, dtype=np.int64, count=2 * n))
        headers = [m.headers() for m in messages]
        if any(headers):
            # An empty header list is no headers (null), as in Spark's Kafka source.
            self.headers.append(pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                                         type=self._headers_type))
        else:
            self.headers.append(pa.nulls(n, self._headers_type))
        return offsets

    def to_batch(self, rng: OffsetRange, schema: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        n = len(self.offset)
        stamps = np.concatenate(self.stamp).reshape(n, 2)
        ts_type = stamps[:, 0] - 1  # Kafka's TimestampType id; -1: the record has no timestamp
        ts_us = np.where(ts_type >= 0, stamps[:, 1], 0) * 1000
        arrays = [
            pa.array(self.key, type=pa.binary()),
            pa.array(self.value, type=pa.binary()),
            pa.repeat(pa.scalar(rng.topic, pa.string()), n),
            pa.repeat(pa.scalar(rng.partition, pa.int32()), n),
            pa.array(np.asarray(self.offset, dtype=np.int64)),
            pa.array(ts_us, type=schema.field("timestamp").type, mask=ts_type < 0),
            pa.array(ts_type.astype(np.int32)),
            pa.concat_arrays(self.headers),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(
    rng: OffsetRange,
    client: Mapping[str, Any],
    settings: ReadSettings,
    schema: Any,
    *,
    clock: Callable[[], float] = time.monotonic,
    tracker: RangeTracker | None = None,
) -> Iterator[Any]:
    """Yield Arrow batches of every record of ``rng`` in offset order; ``tracker`` then holds what was found, lost."""
    import confluent_kafka as ck

    tracker = tracker if tracker is not None else RangeTracker(rng)
    if rng.count == 0:
        return
    read = _RangeRead(ck, rng, client, settings, tracker)
    try:
        yield from read.batches(schema, clock)
    finally:
        read.consumer.close()
    read.account_for_losses()


class _RangeRead:
    """One read of a range under way: its consumer, its position, why it stopped before ``end``, what it lost."""

    def __init__(self, ck: Any, rng: OffsetRange, client: Mapping[str, Any], settings: ReadSettings,
                 tracker: RangeTracker) -> None:
        from kprio_core.kafka.client import refused_settings
        from kprio_core.kafka.security import SecurityWatch

        try:
            self.consumer = ck.Consumer(consumer_conf(client, settings.spark))
        except (ck.KafkaException, ValueError, TypeError) as err:  # a file or secret missing or wrong, named
            raise refused_settings(dict(client), err) from None
        self.watch = SecurityWatch(client)  # a refused login or certificate, or a listener of another protocol, typed
        committed_only = str(client.get("isolation.level", "read_committed")) == "read_committed"
        self.end_name = "last stable offset" if committed_only else "high watermark"
        self.ck = ck
        self.rng = rng
        self.client = client
        self.settings = settings
        self.tracker = tracker
        self.position = rng.start
        self.reason = ""  # why the read stopped before ``end``
        self.stalled = False
        self.notes: list[str] = []  # why offsets were lost while reading on
        self.checked = False  # the topic and partition exist (asked of the broker once the first slice brought nothing)

    def batches(self, schema: Any, clock: Callable[[], float]) -> Iterator[Any]:
        """The Arrow batches of the read, ``batch_records`` records each but the last, until ``end`` or a stop."""
        rng, settings = self.rng, self.settings
        self.consumer.assign([self.ck.TopicPartition(rng.topic, rng.partition, rng.start)])
        deadline = clock() + settings.stall_timeout_s
        headers_type = schema.field("headers").type
        columns = _Columns(headers_type)
        while self.position < rng.end:
            now = clock()
            if now >= deadline:
                self.reason = f"no progress for {settings.stall_timeout_s:g} s at offset {self.position}"
                self.stalled = True
                break
            seen = self._consume(columns, timeout=min(POLL_SLICE_S, deadline - now))
            if seen:
                self.tracker.observe(seen)
            if self.position > self.tracker.position or seen:
                self.tracker.reach(self.position)
                deadline = clock() + settings.stall_timeout_s
            if len(columns) >= settings.batch_records:
                yield columns.to_batch(rng, schema)
                columns = _Columns(headers_type)
            if self.reason:
                break
        self.reason = "" if self.reason == "done" else self.reason
        if len(columns):
            yield columns.to_batch(rng, schema)

    def _consume(self, columns: _Columns, timeout: float) -> list[int]:
        """One consume() slice into ``columns``: the offsets of the records taken (the position moves past them)."""
        want = min(self.settings.batch_records - len(columns), self.rng.end - self.position)
        seen: list[int] = []
        with _collector_paused():
            messages = self.consumer.consume(max(1, want), timeout=timeout)
            if not messages and not self.checked:
                _check_partition(self.consumer, self.rng, self.client, self.settings.stall_timeout_s, self.watch)
                self.checked = True
            if _plain(messages, self.position, self.rng.end):
                seen = columns.take(messages)
                self.position = seen[-1] + 1
                messages = []
        taken = self._one_by_one(messages, seen)
        if taken:
            columns.take(taken)
        return seen

    def _one_by_one(self, messages: list[Any], seen: list[int]) -> list[Any]:
        """The records of a chunk that is not plain, taken one at a time: error events, re-deliveries, the end."""
        taken = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                stop, self.position, note = _on_event(
                    self.consumer, self.ck, self.rng, self.tracker, err, msg, self.position, seen, self.end_name,
                    where=(str(self.client.get("bootstrap.servers", "?")), self.settings.stall_timeout_s),
                    watch=self.watch)
                if stop:
                    self.reason = note or "done"
                    break
                if note:
                    self.notes.append(note)
                continue
            offset = msg.offset()
            if offset < self.position:
                continue  # re-delivered after a re-assign: already taken
            if offset >= self.rng.end:
                self.position = self.rng.end
                break
            seen.append(offset)
            taken.append(msg)
            self.position = offset + 1
        return taken

    def account_for_losses(self) -> None:
        """Offsets lost fail the read (always after a stall); read on past them only when data loss is allowed."""
        lost = self.tracker.lost()
        if lost:
            why = "; ".join([*self.notes, self.reason] if self.reason else self.notes)
            if self.stalled or not self.settings.allow_data_loss:
                raise incomplete_error(self.rng, lost, why, stalled=self.stalled)
            LOGGER.warning("%s: %d offsets lost (%s)", self.rng, sum(g.count for g in lost), why)


def _check_partition(consumer: Any, rng: OffsetRange, client: Mapping[str, Any], timeout_s: float,
                     watch: Any = None) -> None:
    """A missing topic or partition fails by name (a consumer assigned to it would only wait).

    Asked only when a slice brought nothing (a metadata request costs ~50 ms, a first record ~3). A broker
    silent for :data:`~kprio_core.kafka.client.SILENT_S` is asked by ``watch`` whether it speaks the client's
    security protocol (one that does not only closes the connection, and the read would wait ``timeout_s``).
    """
    from confluent_kafka import KafkaException

    from kprio_core.errors import KafkaOperationFailed, KafkaSecurityFailed, TopicMissing
    from kprio_core.kafka.client import SILENT_S, error_name, kafka_failure, refusal

    first = min(SILENT_S, timeout_s) if watch is not None else timeout_s
    ends = time.monotonic() + timeout_s
    try:
        try:
            topic = consumer.list_topics(rng.topic, timeout=first).topics.get(rng.topic)
        except KafkaException as exc:
            if first >= timeout_s or error_name(exc) not in ("_TRANSPORT", "_TIMED_OUT"):
                raise
            # No answer: another protocol's listener, or a refused login or certificate (an admin client asks why).
            mismatch = watch.mismatch(timeout_s=ends - time.monotonic())
            if mismatch is not None:
                watch.failed(mismatch)
            refused = refusal(dict(client), min(ends - time.monotonic(), SECURITY_ASK_S))
            if isinstance(refused, KafkaSecurityFailed):
                watch.failed(refused)
            topic = consumer.list_topics(rng.topic, timeout=max(0.1, ends - time.monotonic())).topics.get(rng.topic)
    except KafkaException as exc:  # typed here (BrokerUnreachable, ...), where the client's error code is known
        raise kafka_failure(exc, what=f"reading {rng}", bootstrap=str(client.get("bootstrap.servers", "?")),
                            timeout_s=timeout_s, topic=rng.topic) from None
    if topic is None or topic.error is not None and not topic.partitions:
        raise TopicMissing(rng.topic, str(client.get("bootstrap.servers", "?")))
    if rng.partition not in topic.partitions:
        raise KafkaOperationFailed(
            f"topic {rng.topic} has no partition {rng.partition} (it has 0..{len(topic.partitions) - 1})")


SECURITY_ASK_S = 5.0
"""Longest the admin client that asks why a read's broker is silent may wait (:func:`_check_partition`)."""


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a consume() chunk is turned into columns.

    Thousands of live Message objects set off full collections of the worker's heap (a quarter of the
    reader's CPU); they die by reference count once taken, so pausing loses nothing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _plain(messages: list[Any], position: int, end: int) -> bool:
    """A chunk of records only, all inside ``[position, end)`` (offsets increase: first and last bound them)."""
    return bool(messages) and not any([m.error() for m in messages]) and (
        messages[0].offset() >= position and messages[-1].offset() < end)


def _on_event(consumer, ck, rng, tracker, err, msg, position, seen, end_name="high watermark", *,
              where=("?", 0.0), watch=None):
    """Handle an error event: (stop reading?, new position, what happened).

    ``end_name``: the isolation level's end; ``where``: bootstrap servers and stall timeout for messages;
    ``watch`` raises security failures typed (settings named, never secrets).
    """
    code = err.code()
    if code == ck.KafkaError._PARTITION_EOF:
        high = msg.offset()  # the high watermark; the last stable offset under read_committed
        if high >= rng.end:
            return True, rng.end, ""  # passed the end: offsets skipped before it held no record
        tracker.observe(seen)
        seen.clear()
        tracker.reach(max(position, high))
        return True, max(position, high), f"end of partition at {end_name} {high}"
    if code == ck.KafkaError._AUTO_OFFSET_RESET:
        tracker.observe(seen)
        seen.clear()
        low, high = consumer.get_watermark_offsets(ck.TopicPartition(rng.topic, rng.partition), timeout=10)
        if position < low:
            # Retention deleted [position, low): a gap; go on from the log start.
            tracker.skip_to(low)
            note = f"deleted by retention: the log starts at {low}"
            if low >= rng.end:
                return True, rng.end, note
            consumer.assign([ck.TopicPartition(rng.topic, rng.partition, low)])
            return False, low, note
        return True, position, f"offset {position} out of range (log is [{low},{high}))"
    from kprio_core.errors import KafkaOperationFailed
    from kprio_core.kafka.client import kafka_failure
    from kprio_core.kafka.security import SecurityWatch

    if msg.topic() is None and not err.fatal():
        # A security refusal fails the read at once, typed (librdkafka would retry until the stall timeout);
        # other client-level events librdkafka retries itself, bounded by the stall deadline.
        (watch or SecurityWatch({"bootstrap.servers": where[0]}))(err)
        LOGGER.info("%s: client event while reading: %s", rng, err.str())
        return False, position, ""

    # Typed by the client's error code here: an unreachable or leaderless cluster passes by itself.
    typed = kafka_failure(err, what=f"reading {rng}", bootstrap=where[0], timeout_s=where[1], topic=rng.topic)
    raise typed if not isinstance(typed, KafkaOperationFailed) else KafkaOperationFailed(f"reading {rng}: {err.str()}")
