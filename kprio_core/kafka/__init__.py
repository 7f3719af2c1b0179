"""The Kafka edge of kprio: lag snapshots, monotonic commits, offsets-for-times, priority topics.

Everything here talks to a broker with confluent-kafka and bounds every call by
``KafkaSettings.timeout_s``; everything else in kprio_core stays pure.
"""

from kprio_core.kafka.client import client_config
from kprio_core.kafka.produce import Record, produce

__all__ = ["Record", "client_config", "produce"]
