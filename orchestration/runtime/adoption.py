"""The start-up check of a fresh ledger: adopt what an earlier life left (a lost or replaced ledger).

An ephemeral container restarted (ledger and Dagster home gone, broker and output kept). Before a fresh ledger's
first plan:

- batch ids continue after the highest id the orchestrator's partitions or the output files know, so a new batch
  never reuses an id (a Dagster partition, a run key, a ``batch_id`` in the output);
- the output is evidence of commits, and nothing in it is deleted. Per priority partition, the published ranges
  that follow on without a hole from where the group stands (:func:`adopted_end`) are committed to their end and
  the new ledger plans from there: never drained again, even if retention took them since; what retention took
  beyond them is a gap the tick reports (``drain.allow_data_loss``). Output beyond a hole stays: the batches that
  drain the hole replace it, as a publish replaces only its own ranges' rows;
- a partition whose output names a later incarnation (a recreated topic a person reset) is drained on as that
  incarnation, so its new files never collide with an earlier log's.

The output is read in its format (:mod:`spark_jobs.tables`). Everything done is recorded (``ledger.mark_adopted``)
and logged (:func:`adoption_line` for a person); an adopted ledger is not fresh any more, so this runs once.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError, LedgerNotFresh
from kprio_core.ledger import parse_batch_id
from kprio_core.log_changes import Belief
from kprio_core.model.offsets import OffsetRange
from orchestration.runtime.ports import Edge, LedgerPort

LOGGER = logging.getLogger("kprio.adoption")
ADOPTED = "kprio_adopted"
"""The attribute of :data:`LOGGER`'s record of an adoption that changed something: its :func:`adoption_line`."""
_WAITING: set[str] = set()
"""Ledgers whose adoption already said it waits for the broker."""


def known_batch_number(known: Iterable[str], published: Iterable[str]) -> int:
    """The highest batch number the orchestrator's batches (``known``) or the published output names (0: none).

    >>> known_batch_number(["b-000003"], ["b-000007", "b-000012"])
    12
    """
    return max((n for n in map(parse_batch_id, [*known, *published]) if n is not None), default=0)


def adoption_line(number: int, moved: Mapping[str, int], incarnations: int) -> str | None:
    """What an adoption did, in one line for a person (ids, groups moved per priority topic, incarnations); None
    when it changed nothing a person acts on.

    >>> adoption_line(12, {"orders-2": 1, "orders-0": 3}, 0)
    'a new ledger took over what an earlier one drained here: batch ids go on after b-000012; the consumer groups \
of 4 partitions moved forward to the end of the output it published (orders-0: 3, orders-2: 1); nothing removed'
    >>> adoption_line(0, {}, 0) is None
    True
    """
    if not (number or moved or incarnations):
        return None
    parts = [f"batch ids go on after b-{number:06d}"] if number else []
    if moved:
        counts = ", ".join(f"{topic}: {n}" for topic, n in sorted(moved.items()))
        parts.append(f"the consumer groups of {sum(moved.values())} partitions moved forward to the end of the output "
                     f"it published ({counts})")
    if incarnations:
        parts.append(f"{incarnations} partitions drain on as the later incarnation their output names")
    return f"a new ledger took over what an earlier one drained here: {'; '.join(parts)}; nothing removed"


def adopted_end(committed: int | None, log_start: int, published: Sequence[OffsetRange]) -> int | None:
    """Where the group should stand after a lost ledger: the end of the published ranges that follow on,
    without a hole, from where it stands now; None when the output adds nothing to the group's offset.

    ``committed``: the group's offset (None: Kafka expired it; then from the earlier of ``log_start`` and the
    output's first offset); ``published``: the output's ranges of the partition (one incarnation, both roots).

    >>> R = lambda s, e: OffsetRange("o-0", 0, s, e)
    >>> adopted_end(None, 600, [R(0, 300), R(300, 529)])  # expired, and retention took the records since
    529
    >>> adopted_end(200, 0, [R(0, 200), R(200, 300), R(300, 350)])  # published, never committed (a crash)
    350
    >>> adopted_end(200, 0, [R(0, 200)]) is None, adopted_end(None, 0, []) is None  # nothing to add
    (True, True)
    >>> adopted_end(200, 0, [R(250, 300)]) is None  # a hole: [200,250) drains first, then replaces it
    True
    >>> adopted_end(None, 0, [R(100, 200)]) is None  # nor from the log's start: [0,100) was never drained
    True
    """
    if not published:
        return None
    first = min(r.start for r in published)
    position = committed if committed is not None else min(log_start, first)
    end = position
    for r in sorted(published, key=lambda r: (r.start, r.end)):
        if r.start > end:
            break  # a hole: what follows waits for the batches that drain it
        end = max(end, r.end)
    return end if end > position else None


def ensure_adopted(known: Iterable[str], ledger: LedgerPort, edge: Edge, config: KprioConfig,
                   *, log=None) -> str | None:
    """Adopt an earlier life's ids, offsets, output and incarnations into a fresh ledger; what was done, or None."""
    if not ledger.is_fresh():
        return None
    from spark_jobs import tables

    log = log or LOGGER
    files = {topic.name: tables.live_files(config.drain, topic.name) for topic in config.topics}
    snapshots = _snapshots_or_wait(ledger, edge, config, log)
    if snapshots is None:
        return None
    number = known_batch_number(known, (b for logical, live in files.items()
                                        for b in tables.batch_ids(config.drain, logical, live)))
    try:
        if number:
            ledger.number_batches_after(number)
    except LedgerNotFresh:
        return None  # another kprio on this ledger (a second kprio drain) recorded its first batch meanwhile

    adopted, moved, incarnations = [], [], []
    for topic in config.topics:
        beliefs, moves, was = _partitions_adopted(snapshots[topic.name], files[topic.name],
                                                  adopted, moved, incarnations)
        if moves:
            try:  # forward only: each end is above the group's offset, as the snapshot saw it
                edge.set_committed(topic, moves, expect=was)
            except KprioError as err:  # the broker went, or the group moved meanwhile: adopt on the next tick
                log.warning(f"the ledger is new; adopting the published output of {topic.name} waits: {err}")
                return None
        if beliefs:
            ledger.beliefs.remember(topic.name, beliefs)

    note = (f"fresh ledger: batch ids continue after b-{number:06d}; adopted committed offsets "
            f"{', '.join(sorted(adopted)) or 'none'}; committed the published output that follows on "
            f"{', '.join(f'{t}[{n}] {b} -> {e}' for t, n, b, e in moved) or 'none'}; "
            f"incarnations {', '.join(incarnations) or 'none above 1'}; nothing removed")
    ledger.mark_adopted(note)
    if number or adopted or moved:
        _tell(log, f"the ledger {ledger!r} is new but an earlier one drained here: {note}",
              adoption_line(number, Counter(topic for topic, *_ in moved), len(incarnations)))
    return note


def _snapshots_or_wait(ledger: LedgerPort, edge: Edge, config: KprioConfig, log) -> dict | None:  # noqa: ANN001
    """Every topic's lag snapshot; None while the broker cannot answer (said once per ledger, not every tick)."""
    try:
        return {topic.name: edge.snapshot(topic, now_ms=int(time.time() * 1000)) for topic in config.topics}
    except KprioError as err:
        if ledger.ledger_id not in _WAITING:
            _WAITING.add(ledger.ledger_id)
            log.warning(f"the ledger is new; adopting the committed offsets waits for the broker: {err}")
        return None


def _partitions_adopted(snapshot, files: Sequence, adopted: list[str], moved: list[tuple],  # noqa: ANN001
                        incarnations: list[str]) -> tuple[list[Belief], dict, dict]:
    """(beliefs to remember, group offsets to move forward, what they were) for one topic; the note's lines go to
    ``adopted``, ``moved`` and ``incarnations``; only the latest incarnation's output counts (a recreated topic)."""
    beliefs, moves, was = [], {}, {}
    for p in snapshot.partitions:
        mine = [f for f in files if (f.topic, f.partition) == (p.topic, p.partition)]
        incarnation = max((f.incarnation for f in mine), default=1)
        end = adopted_end(p.committed, p.log_start, [f.range for f in mine if f.incarnation == incarnation])
        committed = p.committed if end is None else end
        if committed is not None:
            adopted.append(f"{p.topic}[{p.partition}]={committed}")
        if end is not None:
            moves[(p.topic, p.partition)] = end
            was[(p.topic, p.partition)] = p.committed
            before = "none" if p.committed is None else p.committed
            moved.append((p.topic, p.partition, before, end))
        if incarnation > 1:
            incarnations.append(f"{p.topic}[{p.partition}] incarnation {incarnation}")
        if end is not None or incarnation > 1:
            beliefs.append(Belief(p.topic, p.partition, snapshot.topic_ids.get(p.topic), incarnation, committed))
    return beliefs, moves, was


def _tell(log, said: str, line: str | None) -> None:  # noqa: ANN001 - a logger, Dagster's or the standard one
    """Log what an adoption did; kprio's own logger's record carries its line for a person (:data:`ADOPTED`)."""
    if log is LOGGER:
        log.warning(said, extra={ADOPTED: line})
    else:
        log.warning(said)
