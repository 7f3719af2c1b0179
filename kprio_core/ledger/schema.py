"""Tables of the batch ledger, schema v2 (SQLAlchemy Core), portable across SQLite and Postgres.

One copy of each fact (ranges and their outcomes only on range rows; samples derived on read). Times are integer
microseconds since the epoch (UTC), stored alike by every database.

Tables :data:`ADDED_IN_V2` and columns :data:`COLUMNS_ADDED_IN_V2` came without a version bump: new tables an
earlier v2 kprio never reads, columns whose default reads an earlier row as it meant; created when missing.

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
    # The fencing token's number, raised each time the lease passes to another owner. Systems written outside
    # the ledger keep the highest seen and refuse a lower one: a run paused past its lease writes nothing.
    Column("lease_epoch", BigInteger, nullable=False, default=0, server_default="0"),
    # Consecutive transient failures (0 after any other): the first retries at once, the next back off.
    Column("transient_streak", Integer, nullable=False, default=0, server_default="0"),
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    # The last drain's numbers, kept across retries until the next drain; drain_json only once this attempt drained.
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
    # The last drain's outcome (NULL until drained): the numbers the ledger sums, and a JSON of the rest.
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
    # What kprio believes about one priority partition (committed NULL: kprio never committed there).
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
    # A change of the log kprio did not make, and what a rule, the policy or a person (kprio reset) decided.
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
    # One row per run key claimed for launch (kprio_core.ledger.launches); expired rows are deleted.
    Column("run_key", String(255), primary_key=True),
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), nullable=False, index=True),
    Column("owner", String(255), nullable=False),
    Column("claimed_us", BigInteger, nullable=False),
    Column("until_us", BigInteger, nullable=False),
)

commit_samples = Table(
    "kprio_commit_samples",
    METADATA,
    # One row per partition a commit moved (kprio_core.ledger.commit_samples); the newest SAMPLES_KEPT are kept.
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
"""Columns added to schema v2 after its first release, each with a default: ALTER TABLE'd in when missing."""
