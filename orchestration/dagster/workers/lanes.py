"""Which worker of a pool takes which run: the urgent lane and the bulk lane.

With two or more workers, worker 0 is the urgent lane: it takes the runs that drain a logical topic's most urgent
priority (the ``kprio/lane`` tag, :data:`orchestration.runtime.tags.LANE_TAG`); the others are the bulk lane,
started ``workers.bulk_nice`` steps nicer so their Spark JVM and Python workers yield the CPU to an urgent run. A
bulk run never takes the urgent worker, so an urgent run never waits behind one. A pool of one has one lane.
"""

from __future__ import annotations

from collections.abc import Sequence

URGENT, BULK, BOTH = "urgent", "bulk", "both"
"""The lanes, as the runs' ``kprio/lane`` tag names them; ``both``: the lane of a pool of one worker."""


def lanes(count: int) -> tuple[str, ...]:
    """The lane of each worker: the first is the urgent lane once there are two or more.

    >>> lanes(1), lanes(3)
    (('both',), ('urgent', 'bulk', 'bulk'))
    """
    return (BOTH,) if count == 1 else (URGENT, *(BULK,) * (count - 1))


def pick(lane: str, free: Sequence[tuple[int, str]]) -> int | None:
    """The free worker (index, lane) a run of ``lane`` goes to (urgent: its own lane first, else any); None: it waits.

    >>> pick("urgent", [(1, "bulk"), (0, "urgent")]), pick("urgent", [(1, "bulk")]), pick("bulk", [(0, "urgent")])
    (0, 1, None)
    >>> pick("bulk", [(0, "urgent"), (2, "bulk")]), pick("bulk", []), pick("bulk", [(0, "both")])
    (2, None, 0)
    """
    same = [i for i, worker_lane in free if worker_lane in (lane, BOTH)]
    if same:
        return same[0]
    if lane == URGENT and free:
        return free[0][0]
    return None
