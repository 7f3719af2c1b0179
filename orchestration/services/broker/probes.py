"""Asking an embedded broker (or any Kafka cluster) whether it is up: its metadata, its group coordinators.

Each probe is a short-lived admin client with a short reconnect backoff, asked with a timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from orchestration.services.broker.props import coordinator_groups
from orchestration.services.process import wait_for


def answers_metadata(bootstrap: str, timeout_s: float, client: Mapping[str, str] | None = None) -> bool:
    """Whether a broker at ``bootstrap`` answers metadata within ``timeout_s`` (``client``: security settings)."""
    return live_brokers(bootstrap, timeout_s, client) is not None


def live_brokers(bootstrap: str, timeout_s: float, client: Mapping[str, str] | None = None) -> set[int] | None:
    """Ids of the brokers (registered, unfenced) the cluster at ``bootstrap`` lists; None if none answers in time."""
    return listed_brokers(probe_admin(bootstrap, client), timeout_s)


def listed_brokers(admin: object, timeout_s: float) -> set[int] | None:
    from confluent_kafka import KafkaException

    try:
        return set(admin.list_topics(timeout=timeout_s).brokers)  # type: ignore[attr-defined]
    except KafkaException:
        return None


def probe_admin(bootstrap: str, client: Mapping[str, str] | None = None) -> object:
    from confluent_kafka.admin import AdminClient

    # Short reconnect backoff: librdkafka's default grows to 10 s after refusals, longer than a broker's start.
    return AdminClient({**(client or {}), "bootstrap.servers": bootstrap, "reconnect.backoff.ms": 50,
                        "reconnect.backoff.max.ms": 200, "logger": logging.getLogger("kprio.broker")})


def coordinators_ready(admin: Any, timeout_s: float) -> bool:
    """Wait until every group coordinator answers (``__consumer_offsets`` created and loaded): librdkafka's admin
    ListConsumerGroupOffsets crashes the process on the NOT_COORDINATOR a broker answers meanwhile (librdkafka issue
    5040). DescribeGroups to one group per partition reaches each."""
    from confluent_kafka import KafkaException

    pending = set(coordinator_groups())

    def loaded() -> bool:
        futures = admin.describe_consumer_groups(sorted(pending), request_timeout=5)
        for group, future in futures.items():
            try:
                future.result()
            except KafkaException as err:
                if err.args[0].name() != "GROUP_ID_NOT_FOUND":
                    continue
            pending.discard(group)
        return not pending

    return wait_for(loaded, timeout_s, interval_s=0.1)
