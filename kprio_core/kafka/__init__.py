"""The Kafka edge of kprio: lag snapshots, monotonic commits, offsets-for-times, priority topics.

Everything here talks to a broker with confluent-kafka and bounds every call by
``KafkaSettings.timeout_s``; everything else in kprio_core stays pure.
"""

from kprio_core.kafka.commit import CommitReport, decide_commits
from kprio_core.kafka.edge import KafkaEdge
from kprio_core.kafka.lag import oldest_pending_age_ms
from kprio_core.kafka.produce import produce

__all__ = [
    "CommitReport",
    "KafkaEdge",
    "decide_commits",
    "oldest_pending_age_ms",
    "produce",
]
