"""Tables of the batch ledger, schema v2 (SQLAlchemy Core), portable across SQLite and Postgres.

One copy of each fact: a batch's ranges live only in ``kprio_ranges`` (its plan JSON keeps the
decisions, not the ranges); a range's drain outcome lives only on its range row; burst windows,
rate samples, average record sizes and throughput are derived from these rows on read.
Times are integer microseconds since the epoch (UTC), so every database stores them alike.

``kprio_partitions`` (what kprio believes about each partition) and ``kprio_log_events`` (every
change of the log kprio did not make, and every decision about one) were added to v2 without a
bump: they are new tables only, which an earlier v2 kprio never reads, so a v2 ledger opened by
this kprio gets them created (:data:`ADDED_IN_V2`) and every earlier one keeps working on it.
``kprio_launches`` (who claimed the launch of a run key, so two drivers never launch one run)
was added the same way, and two columns of ``kprio_batches`` (``lease_epoch``, ``transient_streak``),
each with a default that reads an earlier row as it meant (:data:`COLUMNS_ADDED_IN_V2`).
``kprio_commit_samples`` (each partition's newest commits with the log end after each, the lag verdict's
window) too; a ledger that gets it fills it from its committed batches (:func:`.commit_samples.backfill`).

>>> sorted(t.name for t in METADATA.sorted_tables)
['kprio_batches', 'kprio_commit_samples', 'kprio_events', 'kprio_launches', 'kprio_log_events', 'kprio_meta', 'kprio_partitions', 'kprio_ranges', 'kprio_topic_locks']
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

SCHEMA_VERSION = 2

METADATA = MetaData()

meta = Table(
    "kprio_meta",
    METADATA,
    # One row (id 1): who this ledger is, so output and a later life can tell ledgers apart.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("schema_version", Integer, nullable=False),
    Column("ledger_id", String(32), nullable=False),
    # Batch number of autoincrement key 1; raised by number_batches_after() while no batch exists.
    Column("first_batch", BigInteger, nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("adopted_us", BigInteger),
    Column("adopted_note", Text),
)

batches = Table(
    "kprio_batches",
    METADATA,
    # AUTOINCREMENT on SQLite so a key (and so a batch id) is never handed out twice.
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("logical_topic", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("plan_json", Text, nullable=False),  # the DrainPlan without its ranges
    Column("attempts", Integer, nullable=False),
    Column("replay_of_committed", Boolean, nullable=False),
    Column("parent_id", Integer, ForeignKey("kprio_batches.id")),  # the batch this one was split from
    Column("reason", Text),
    # The last failure had a passing cause (broker, disk, Spark): retried for good, never exhausted.
    Column("transient", Boolean, nullable=False, default=False),
    Column("retry_at_us", BigInteger),
    Column("lease_owner", String(255)),
    Column("lease_until_us", BigInteger),
    # The fencing token's number: +1 each time the lease passes to another owner. The systems a run
    # writes to outside the ledger (a Delta table's transaction, a published file's metadata) keep the
    # highest they saw and refuse a lower one: a run paused past its lease writes nothing when it wakes.
    Column("lease_epoch", BigInteger, nullable=False, default=0, server_default="0"),
    # Consecutive transient failures (0 after any other failure): the first is retried as soon as its
    # cause is gone, the next ones back off (recovery.backoff_s doubling) unless a probe saw the cause.
    Column("transient_streak", Integer, nullable=False, default=0, server_default="0"),
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    # The last drain's numbers (per-range ones are on the range rows), kept across retries until
    # the next drain replaces them; drain_json is set while the current attempt has drained.
    Column("drained_us", BigInteger),
    Column("drain_seconds", Float),
    Column("drain_json", Text),  # DrainResult without batch id, topic, ranges and seconds
    Column("checks_json", Text),
    Column("commit_json", Text),
    Column("committed_us", BigInteger),  # when its offsets were committed (the first commit)
    Index("ix_kprio_batches_topic_state", "logical_topic", "state"),
    sqlite_autoincrement=True,
)

ranges = Table(
    "kprio_ranges",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), nullable=False, index=True),
    Column("priority", Integer, nullable=False),
    Column("topic", String(255), nullable=False),
    Column("kafka_partition", Integer, nullable=False),
    Column("start_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("est_bytes", BigInteger, nullable=False),
    # The last drain's outcome (NULL until drained): RangeStats split into the numbers the
    # ledger sums and a JSON of the rest.
    Column("output", BigInteger),
    Column("dead", BigInteger),
    Column("bytes", BigInteger),
    Column("stats_json", Text),
    Index("ix_kprio_ranges_partition", "topic", "kafka_partition", "start_offset"),
)

events = Table(
    "kprio_events",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), nullable=False, index=True),
    Column("from_state", String(16)),
    Column("to_state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("at_us", BigInteger, nullable=False),
    Column("reason", Text),
    sqlite_autoincrement=True,
)

topic_locks = Table(
    "kprio_topic_locks",
    METADATA,
    # One row per logical topic; Postgres reservations take it with SELECT ... FOR UPDATE.
    Column("logical_topic", String(255), primary_key=True),
)

partitions = Table(
    "kprio_partitions",
    METADATA,
    # What kprio believes about one priority partition: the topic's identity, the incarnation it
    # drains, and the committed offset kprio itself last wrote (NULL: never committed).
    Column("topic", String(255), primary_key=True),
    Column("kafka_partition", Integer, primary_key=True, autoincrement=False),
    Column("logical_topic", String(255), nullable=False, index=True),
    Column("topic_id", String(64)),
    Column("incarnation", Integer, nullable=False, default=1),
    Column("committed", BigInteger),
    Column("updated_us", BigInteger, nullable=False),
)

log_events = Table(
    "kprio_log_events",
    METADATA,
    # A change of the log kprio did not make (topic recreated, offsets moved or gone, ...), and
    # what was decided about it: by a rule, by the configured policy, or by a person (kprio reset).
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("logical_topic", String(255), nullable=False, index=True),
    Column("topic", String(255), nullable=False),
    Column("kafka_partition", Integer, nullable=False),
    Column("incarnation", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("decided_by", String(16), nullable=False),
    Column("believed", BigInteger),
    Column("committed", BigInteger),  # the group's offset when the change was seen
    Column("committed_after", BigInteger),  # what kprio committed about it (a restore, a reset)
    Column("log_start", BigInteger),
    Column("high_watermark", BigInteger),
    Column("at_us", BigInteger, nullable=False),
    Column("note", Text),
    sqlite_autoincrement=True,
)

launches = Table(
    "kprio_launches",
    METADATA,
    # One row per run key a driver (the sensor, a kprio drain) decided to launch: the first to
    # insert it launches the run; another driver deciding the same launch sees the claim and does
    # not. A claim ends at until_us (or when its owner is known dead); expired rows are deleted.
    Column("run_key", String(255), primary_key=True),
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), nullable=False, index=True),
    Column("owner", String(255), nullable=False),
    Column("claimed_us", BigInteger, nullable=False),
    Column("until_us", BigInteger, nullable=False),
)

commit_samples = Table(
    "kprio_commit_samples",
    METADATA,
    # One row per partition a commit moved: the group's new offset, when, and where the log ended right
    # after (so the lag at commit time, which Burrow stores with each commit). The lag verdict's window is
    # a partition's newest rows; only the newest SAMPLES_KEPT of a partition are kept.
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("logical_topic", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("kafka_partition", Integer, nullable=False),
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), nullable=False),
    Column("at_us", BigInteger, nullable=False),
    Column("committed", BigInteger, nullable=False),
    Column("log_end", BigInteger),  # NULL: not seen (a commit recorded before the ledger kept it)
    Index("ix_kprio_commit_samples_partition", "topic", "kafka_partition", "at_us"),
    sqlite_autoincrement=True,
)

ADDED_IN_V2 = (partitions, log_events, launches, commit_samples)
"""Tables added to schema v2 after its first release: created when a v2 ledger lacks them."""
COLUMNS_ADDED_IN_V2 = ((batches, ("lease_epoch", "transient_streak")),)
"""Columns added to schema v2 tables after its first release, each with a default (so every earlier row
reads as it meant): added with ALTER TABLE when a v2 ledger lacks them."""
