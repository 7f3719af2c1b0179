r"""``kprio dead-letters``: the records a drain quarantined, with where they came from and why.

A dead letter is shown as read from Kafka (raw key, value, headers), with its batch and error: the table shows a
value's first bytes safely, ``--json`` raw bytes as base64 and as text when they decode:

>>> preview(b'{"order_id": "o-1"}'), preview(b"\xff\xfe order #7"), preview(None), preview(b"a\nb")
('{"order_id": "o-1"}', '\\xff\\xfe order #7', '(null)', 'a\\nb')
>>> preview(b"x" * 50, width=8)
'xxxxxxxx...'
>>> raw_doc(b"\xff"), raw_doc(b"ok")
({'base64': '/w==', 'text': None}, {'base64': 'b2s=', 'text': 'ok'})
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kprio_core.errors import BatchNotFound, DeadLettersUnreadable
from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    check_batch_id,
    chosen_topics,
    config_from,
    existing_directory,
    print_json,
)

if TYPE_CHECKING:
    from kprio_core.config import DrainSettings

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Logical topic to show (default: every configured topic).")
]
BatchOption = Annotated[
    str | None, typer.Option("--batch", "-b", help="Only the dead letters drained by this batch, e.g. b-000042.",
                             show_default=False)
]
LimitOption = Annotated[
    int, typer.Option("--limit", "-n", min=0, help="Show at most this many (most urgent priority first, then by "
                      "topic, partition and offset); 0: all.")
]

PREVIEW_BYTES = 40
COLUMNS = ("batch_id", "priority", "topic", "partition", "offset", "timestamp", "timestampType", "lane", "key",
           "value", "headers", "error")
"""What a dead-letter file holds (the raw Kafka columns, kprio's, and the error)."""


def preview(data: bytes | None, width: int = PREVIEW_BYTES) -> str:
    """The first ``width`` bytes as text a terminal shows safely: invalid UTF-8 and control characters escaped."""
    if data is None:
        return "(null)"
    text = data[:width].decode("utf-8", errors="backslashreplace")
    safe = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return safe + ("..." if len(data) > width else "")


def raw_doc(data: bytes | None) -> dict[str, str | None] | None:
    """Raw bytes for JSON: base64 always, text only when they are valid UTF-8."""
    if data is None:
        return None
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"base64": base64.b64encode(data).decode("ascii"), "text": text}


def letter_doc(logical_topic: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """One dead letter as JSON: every field, raw key/value/header values as base64 and text."""
    stamp = row.get("timestamp")
    return {
        "logical_topic": logical_topic,
        "batch_id": row.get("batch_id"),
        "priority": row.get("priority"),
        "topic": row.get("topic"),
        "partition": row.get("partition"),
        "offset": row.get("offset"),
        "timestamp": stamp.isoformat() if isinstance(stamp, datetime) else stamp,
        "timestamp_type": row.get("timestampType"),
        "lane": row.get("lane"),
        "key": None if row.get("key") is None else _text(row["key"]),
        "key_raw": raw_doc(row.get("key")),
        "value": raw_doc(row.get("value")),
        "headers": [{"key": h.get("key"), "value": raw_doc(h.get("value"))} for h in row.get("headers") or []],
        "error": row.get("error"),
    }


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return preview(data, width=len(data))


def _sort_key(row: Mapping[str, Any]) -> tuple:
    return (-(row.get("priority") or 0), row.get("topic") or "", row.get("partition") or 0, row.get("offset") or 0)


def read_letters(drain: DrainSettings, logical_topic: str, batch_id: str | None) -> list[dict[str, Any]]:
    """The published dead letters of a topic (or of one batch), most urgent first."""
    from spark_jobs.layout import DEAD_LETTERS
    from spark_jobs.tables import read_rows

    root = drain.dead_letter_path
    try:
        table = read_rows(drain, DEAD_LETTERS, logical_topic, batch_id=batch_id)
    except Exception as err:  # noqa: BLE001 - pyarrow's and delta-rs's errors alike: one line naming the root
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DeadLettersUnreadable(f"cannot read the dead letters of {logical_topic}: {first}",
                                    where=f"drain.dead_letter_path {root}") from None
    rows = table.to_pylist() if table.num_columns else []
    return [letter_doc(logical_topic, row) for row in sorted(rows, key=_sort_key)]


def _table(letters: Sequence[Mapping[str, Any]], title: str) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for name, justify in (("batch", "left"), ("prio", "right"), ("record", "left"), ("key", "left"),
                          ("error", "left"), (f"value (first {PREVIEW_BYTES} bytes)", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for d in letters:
        key = d["key_raw"]
        value = d["value"]
        # Text cells: a value such as ["o-1"] is data, never rich markup.
        table.add_row(
            Text(str(d["batch_id"])), Text(str(d["priority"])),
            Text(f"{d['topic']}[{d['partition']}]@{d['offset']}"),
            Text(preview(_b64(key), width=24)), Text(str(d["error"])),
            Text(preview(_b64(value))),
        )
    return table


def _b64(raw: Mapping[str, Any] | None) -> bytes | None:
    try:
        return None if raw is None else base64.b64decode(raw["base64"])
    except binascii.Error:  # pragma: no cover - we encoded it ourselves
        return None


def batch_known(ledger_url: str, batch_id: str) -> None:
    """BatchNotFound unless the ledger at ``ledger_url`` knows ``batch_id`` (no ledger knows none); reads only."""
    from kprio_core.ledger import Ledger, ledger_exists
    from kprio_core.urls import shown_url

    where = f"ledger.url {shown_url(ledger_url)}"
    if not ledger_exists(ledger_url):
        raise BatchNotFound(f"no batch {batch_id}: there is no ledger yet", where=where)
    with Ledger(ledger_url) as ledger:
        try:
            ledger.batches.get(batch_id)
        except BatchNotFound as err:
            raise BatchNotFound(err.what, where=where) from None


def _describe(topics: Iterable[str], batch_id: str | None) -> str:
    names = ", ".join(topics)
    return f"batch {batch_id} of {names}" if batch_id else names


def dead_letters(
    config: ConfigOption = None,
    topic: TopicOption = None,
    batch: BatchOption = None,
    limit: LimitOption = 50,
    as_json: JsonOption = False,
) -> None:
    """Show the quarantined records (dead letters) of a logical topic or one batch: where from, and why.

    Reads the published dead letters under drain.dead_letter_path (files, or the dead-letter table of drain.format) with pyarrow (no Spark, no broker). The table shows the batch, the priority, where the record was (topic, partition, offset), its key, the error and the first bytes of its raw value; --json gives every field, with key, value and headers as base64 and as text when they decode.

    Example: kprio dead-letters --config kprio-data/demo/kprio.yaml --topic orders --limit 20
    """
    settings = config_from(config)
    topics = chosen_topics(settings, topic)
    root = settings.drain.dead_letter_path
    if batch is not None:
        check_batch_id(batch, "--batch")
    # A local root that is something else than a directory is a wrong setting, not "no dead letters".
    published = "://" in root or existing_directory("drain.dead_letter_path", root)
    letters = [d for t in topics for d in read_letters(settings.drain, t.name, batch)] if published else []
    if batch is not None and not letters:
        batch_known(settings.ledger.url, batch)  # no dead letters of a batch that does not exist is an error
    shown = letters if limit == 0 else letters[:limit]
    where = _describe((t.name for t in topics), batch)
    absolute_root = str(Path(root).absolute()) if "://" not in root else root
    if as_json:
        print_json({"root": absolute_root, "topics": [t.name for t in topics], "batch_id": batch,
                    "total": len(letters), "shown": len(shown), "dead_letters": shown})
        return
    if not letters:
        typer.echo(f"no dead letters of {where} in {absolute_root}")
        return
    from rich.console import Console

    console = Console()
    console.print(_table(shown, title=f"dead letters of {where}: {len(letters):,}"))
    if len(shown) < len(letters):
        console.print(f"showing {len(shown):,} of {len(letters):,} (--limit 0 shows all, --json every field)",
                      highlight=False)
