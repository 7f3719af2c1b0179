"""``kprio demo --values avro``: the demo's orders as Avro through the schema registry (embedded Apicurio unless
``--config`` names one), so the drain decodes them with the registry into typed columns.

Avro types: ``amount`` ``decimal(10,2)``, ``tier`` an enum, ``created`` ``timestamp-millis`` (JSON's ``created_ms``).
A poison record stays the JSON demo's bytes: not in the wire format, it goes to the dead letters with that reason.

>>> value = json.dumps({"order_id": "o-1", "customer": "c-1", "sku": "s", "quantity": 2, "amount": 12.5,
...                     "tier": "express", "created_ms": 1700000000000})
>>> avro_order(value)["amount"], avro_order(value)["created"].isoformat()
(Decimal('12.50'), '2023-11-14T22:13:20+00:00')
>>> avro_order("not json") is None, avro_order('{"order_id": "o-1"}') is None
(True, True)
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from kprio_core.model.registry import RegistryEndpoint
from orchestration.demo.workload import ORDER_SCHEMA, TIERS

ORDER_AVRO: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "kprio.demo",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "sku", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": sorted(TIERS.values())}},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
"""The demo order's Avro schema (subjects ``<priority topic>-value``)."""


def avro_order(value: str | bytes | None) -> dict[str, Any] | None:
    """The Avro record of a well-formed JSON order, or None for a poison value (it is produced as it is)."""
    try:
        order = json.loads(value) if value is not None else None
    except ValueError:
        return None
    if not isinstance(order, dict) or set(order) != set(ORDER_SCHEMA) or isinstance(order["amount"], str):
        return None
    return {**{k: order[k] for k in ("order_id", "customer", "sku", "quantity", "tier")},
            "amount": Decimal(str(order["amount"])).quantize(Decimal("0.01")),
            "created": dt.datetime.fromtimestamp(order["created_ms"] / 1000, tz=dt.timezone.utc)}


def client_conf(registry: str | RegistryEndpoint) -> dict[str, str]:
    """``SchemaRegistryClient`` settings of a registry URL or endpoint (secured as kprio's drains reach it).

    >>> sorted(client_conf(RegistryEndpoint("https://sr:8081", username="u", password="p", ca_location="/ca.pem")))
    ['basic.auth.user.info', 'ssl.ca.location', 'url']
    """
    if isinstance(registry, str):
        return {"url": registry}
    conf = {"url": registry.url}
    if registry.username:
        conf["basic.auth.user.info"] = f"{registry.username}:{registry.password or ''}"
    for key, value in (("ssl.ca.location", registry.ca_location),
                       ("ssl.certificate.location", registry.certificate_location),
                       ("ssl.key.location", registry.key_location), ("ssl.key.password", registry.key_password)):
        if value:
            conf[key] = value
    return conf


class AvroOrders:
    """Encodes the demo's JSON orders as Avro in the wire format, registering the schema on first use."""

    def __init__(self, registry: str | RegistryEndpoint) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer

        self._serialize = AvroSerializer(SchemaRegistryClient(client_conf(registry)), json.dumps(ORDER_AVRO))

    def encode(self, topic: str, value: str | bytes | None) -> str | bytes | None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        order = avro_order(value)
        return value if order is None else self._serialize(order, SerializationContext(topic, MessageField.VALUE))
