"""Tables of the batch ledger (SQLAlchemy Core), portable across SQLite and Postgres.

Times are integer microseconds since the epoch (UTC) so every database stores them alike.
A range is *reserved* while its batch is in flight: that is read from ``batches.state``,
never stored twice.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

METADATA = MetaData()

batches = Table(
    "kprio_batches",
    METADATA,
    # AUTOINCREMENT on SQLite so a key (and so a batch id) is never handed out twice.
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("logical_topic", String(255), nullable=False, index=True),
    Column("state", String(16), nullable=False, index=True),
    Column("plan_json", Text, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("est_bytes", BigInteger, nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("replay_of_committed", Boolean, nullable=False),
    Column("reason", Text),
    Column("drain_stats_json", Text),
    Column("check_results_json", Text),
    Column("commit_report_json", Text),
    sqlite_autoincrement=True,
)

ranges = Table(
    "kprio_ranges",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), nullable=False, index=True),
    Column("topic", String(255), nullable=False),
    Column("kafka_partition", Integer, nullable=False),
    Column("start_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("est_bytes", BigInteger, nullable=False),
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

drained_topics = Table(
    "kprio_drained_topics",
    METADATA,
    # Records and bytes one batch drained from one priority topic (for average record sizes).
    Column("batch_id", Integer, ForeignKey("kprio_batches.id"), primary_key=True),
    Column("topic", String(255), primary_key=True),
    Column("logical_topic", String(255), nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("drained_us", BigInteger, nullable=False),
    Index("ix_kprio_drained_topics_recent", "logical_topic", "topic", "drained_us"),
)

topic_locks = Table(
    "kprio_topic_locks",
    METADATA,
    # One row per logical topic; Postgres reservations take it with SELECT ... FOR UPDATE.
    Column("logical_topic", String(255), primary_key=True),
)

topic_state = Table(
    "kprio_topic_state",
    METADATA,
    # Small JSON state per logical topic that must survive restarts (burst windows, rate tracker).
    Column("logical_topic", String(255), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("value_json", Text, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
)
