"""The start-up check of a fresh ledger: adopt what an earlier life left (a lost or replaced ledger).

An ephemeral container restarts, the ledger file and the Dagster home are gone, the broker and
the output kept their data. Before the first plan of a fresh ledger:

- batch ids continue after the highest id the orchestrator (Dagster's partitions) or the output files know, so a
  new batch never reuses an id (a Dagster partition, a run key, a ``batch_id`` in the output);
- committed offsets the ledger does not know are adopted as they are: the new ledger plans from
  them, and output files are named by the offsets they hold, so no new batch can overwrite
  output of committed offsets;
- output files of offsets that were never committed (published by a run the earlier life never
  committed) are removed: those offsets will be drained again, and a reader must not see them
  twice.

What the output holds is read in its format (:mod:`spark_jobs.tables`): the Parquet files'
names and footers, or a Delta table's log (the files its current version holds, and every batch
its commits name); uncommitted files leave a Delta table in one commit that says why.

Everything it did is recorded (``Ledger.mark_adopted``) and logged; an adopted ledger is not
fresh any more, so this runs once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError, LedgerNotFresh
from kprio_core.ledger import Ledger, parse_batch_id

LOGGER = logging.getLogger("kprio.adoption")
_WAITING: set[str] = set()
"""Ledgers whose adoption already said it waits for the broker."""


def known_batch_number(known: Iterable[str], published: Iterable[str]) -> int:
    """The highest batch number the orchestrator's batches (``known``) or the published output names (0: none).

    >>> known_batch_number(["b-000003"], ["b-000007", "b-000012"])
    12
    """
    return max((n for n in map(parse_batch_id, [*known, *published]) if n is not None), default=0)


def _never_committed(file, committed) -> bool:  # noqa: ANN001 - a LiveFile; committed offsets by (topic, partition)
    """A published file whose offsets its group never committed. An earlier life's later incarnation
    is kept: its offsets are not the group's."""
    start = committed.get((file.topic, file.partition))
    return file.incarnation == 1 and (start is None or file.start >= start)


def ensure_adopted(known: Iterable[str], ledger: Ledger, edge, config: KprioConfig,
                   *, log=None) -> str | None:
    """Adopt an earlier life's ids, committed offsets and output into a fresh ledger; what was done, or None."""
    if not ledger.is_fresh():
        return None
    from spark_jobs import tables

    log = log or LOGGER
    files = {topic.name: tables.live_files(config.drain, topic.name) for topic in config.topics}
    try:
        committed = {tp: offset for topic in config.topics for tp, offset in edge.committed(topic).items()}
    except KprioError as err:
        if ledger.ledger_id not in _WAITING:  # once per ledger: every tick would repeat it
            _WAITING.add(ledger.ledger_id)
            log.warning(f"the ledger is new; adopting the committed offsets waits for the broker: {err}")
        return None
    removed = []
    for logical, live in files.items():
        uncommitted = [f for f in live if _never_committed(f, committed)]
        if uncommitted:
            tables.remove_files(config.drain, logical, uncommitted, "a fresh ledger's adoption: offsets never committed")
            removed += [f"{f.topic}[{f.partition}]@[{f.start},{f.end})" for f in uncommitted]
    number = known_batch_number(known, (b for logical, live in files.items()
                                        for b in tables.batch_ids(config.drain, logical, live)))
    try:
        if number:
            ledger.number_batches_after(number)
    except LedgerNotFresh:
        return None  # another kprio on this ledger (a second kprio drain) recorded its first batch meanwhile

    adopted = sorted(f"{t}[{p}]={o}" for (t, p), o in committed.items() if o is not None)
    note = (f"fresh ledger: batch ids continue after b-{number:06d}; adopted committed offsets "
            f"{', '.join(adopted) or 'none'}; removed uncommitted output {', '.join(removed) or 'none'}")
    ledger.mark_adopted(note)
    if number or adopted or removed:
        log.warning(f"the ledger {ledger!r} is new but an earlier one drained here: {note}")
    return note
