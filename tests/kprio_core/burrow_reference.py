"""Burrow's partition evaluator, transcribed line by line for the tests: the reference kprio's verdict is held to.

linkedin/Burrow, ``core/internal/evaluator/caching.go`` at ced55ba (v1.9.x; the rewind rules since d69a8ec,
v1.3.7): ``calculatePartitionStatus`` and the rules it calls, with Burrow's names, units (timestamps in
milliseconds, ``time_now`` in seconds) and integer arithmetic. Nothing else uses it: the product's rules live
in :mod:`kprio_core.verdict`. :data:`BURROW_CASES` is Burrow's own table of cases (``caching_test.go``), so
the transcription is checked against what Burrow's tests say, case by case.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, STOP, STALL, REWIND = "OK", "WARN", "STOP", "STALL", "REWIND"


@dataclass(frozen=True)
class ConsumerOffset:
    """``protocol.ConsumerOffset``: a commit as Burrow stores it (its lag at commit time, or nil)."""

    offset: int
    timestamp: int
    """Milliseconds."""
    lag: int | None


def is_lag_always_not_zero(offsets: list[ConsumerOffset], allowed_lag: int) -> bool:
    for offset in offsets:
        if offset.lag is not None and offset.lag <= allowed_lag:
            return False
    return True


def check_if_offsets_rewind(offsets: list[ConsumerOffset]) -> int:
    for i in range(1, len(offsets)):
        if offsets[i].offset < offsets[i - 1].offset:
            return i
    return -1


def check_if_rewind_recovered(offsets: list[ConsumerOffset], reset_index: int) -> bool:
    previous_progress = offsets[reset_index - 1]
    for i in range(reset_index, len(offsets)):
        if offsets[i].offset >= previous_progress.offset:
            return True
    return False


def check_if_offsets_stopped(offsets: list[ConsumerOffset], time_now: int) -> bool:
    first_timestamp = offsets[0].timestamp
    last_timestamp = offsets[-1].timestamp
    return (time_now * 1000) - last_timestamp > last_timestamp - first_timestamp


def check_if_offsets_stalled(offsets: list[ConsumerOffset]) -> bool:
    for i in range(1, len(offsets)):
        if offsets[i].offset != offsets[i - 1].offset:
            return False
    return True


def check_if_lag_not_decreasing(offsets: list[ConsumerOffset]) -> bool:
    last_lag = None
    for offset in offsets:
        if offset.lag is not None:
            if last_lag is not None and offset.lag < last_lag:
                return False
            last_lag = offset.lag
    return True


def check_if_recent_lag_zero(offsets: list[ConsumerOffset], broker_offsets: list[int]) -> bool:
    last_offset = offsets[-1].offset
    return any(b <= last_offset for b in broker_offsets)


def calculate_partition_status(offsets: list[ConsumerOffset], broker_offsets: list[int], current_lag: int,
                               time_now: int, allowed_lag: int) -> str:
    if current_lag > allowed_lag:
        if check_if_offsets_stopped(offsets, time_now) and not check_if_recent_lag_zero(offsets, broker_offsets):
            return STOP
        rewind_index = check_if_offsets_rewind(offsets)
        if rewind_index > 0 and not check_if_rewind_recovered(offsets, rewind_index):
            return REWIND
        if is_lag_always_not_zero(offsets, allowed_lag):
            if check_if_offsets_stalled(offsets):
                return STALL
            if check_if_lag_not_decreasing(offsets):
                return WARN
    return OK


def evaluate_partition_status(offsets: list[ConsumerOffset | None], broker_offsets: list[int], current_lag: int,
                              time_now: int, allowed_lag: int, minimum_complete: float = 0.0) -> str:
    """``evaluatePartitionStatus``: nil entries (a ring not full yet) are cut off first; an empty ring is OK."""
    if not offsets:
        return OK
    first = next((i for i, o in enumerate(offsets) if o is not None), len(offsets) - 1)
    kept = [o for o in offsets[first:] if o is not None]
    if not kept:
        return OK
    complete = len(kept) / len(offsets)
    if complete >= minimum_complete:
        return calculate_partition_status(kept, broker_offsets, current_lag, time_now, allowed_lag)
    return OK


def _o(offset: int, ts: int, lag: int | None) -> ConsumerOffset:
    return ConsumerOffset(offset, ts, lag)


def _steps(start: int, ts: int, lags: list[int], step: int = 1000) -> list[ConsumerOffset]:
    return [_o(start + i * step, ts + i * 100_000, lag) for i, lag in enumerate(lags)]


_FLAT = [_o(1000, 100_000 * (i + 1), lag) for i, lag in enumerate((0, 50, 100, 150, 200))]
_STALLED = [_o(1000, 100_000 * (i + 1), lag) for i, lag in enumerate((100, 150, 200, 250, 300))]
_REWOUND = [_o(1000, 100000, 100), _o(2000, 200000, 150), _o(3000, 300000, 200), _o(2000, 400000, 1250)]
_TICKS = [_o(792748079 + i, 1512224600000 + ms, 0) for i, ms in enumerate(
    (18356, 19362, 20366, 21367, 22370, 23373, 24378, 25379, 26383, 27383, 28383, 29388, 30391, 31394, 32397))]

BURROW_CASES: dict[int, tuple] = {
    # case: (offsets, broker offsets, current lag, time now (s), allowed lag,
    #        isLagAlwaysNotZero, checkIfOffsetsRewind, checkIfOffsetsStopped, checkIfOffsetsStalled,
    #        checkIfLagNotDecreasing, checkIfRecentLagZero, status)
    0: (_steps(1000, 100000, [0, 50, 100, 150, 200]), [5200], 200, 600, 0, False, -1, False, False, True, False, OK),
    1: (_steps(1000, 100000, [0, 50, 100, 150, 200]), [5200], 200, 900, 0, False, -1, False, False, True, False, OK),
    2: (_steps(1000, 100000, [0, 50, 100, 150, 200]), [5200], 200, 1000, 0, False, -1, True, False, True, False, STOP),
    3: (_steps(1000, 100000, [50, 100, 150, 200, 250]), [5250], 250, 1000, 0, True, -1, True, False, True, False, STOP),
    4: (_FLAT, [1200], 200, 600, 0, False, -1, False, True, True, False, OK),
    5: (_STALLED, [1300], 300, 600, 0, True, -1, False, True, True, False, STALL),
    6: ([_o(1000, 100_000 * (i + 1), 100) for i in range(5)], [1100], 100, 600, 0, True, -1, False, True, True, False,
        STALL),
    7: ([*_REWOUND, _o(4000, 500000, 300)], [4300], 300, 600, 0, True, 3, False, False, False, False, OK),
    8: (_steps(1000, 100000, [50, 100, 150, 200, 250]), [5250], 0, 1000, 0, True, -1, True, False, True, False, OK),
    9: (_TICKS, [792749024, 792749000, 792748800, 792748600, 792748500], 931, 1512224650, 0, False, -1, True, False,
        True, False, STOP),
    10: (_TICKS, [792748094, 792748093, 792748093, 792748093], 1, 1512224650, 0, False, -1, True, False, True, True,
         OK),
    11: ([_o(1000 + 500 * i, 100000 + 50000 * i, None if i % 2 else 50 * (i // 2)) for i in range(10)], [5700], 200,
         600, 0, False, -1, False, False, True, False, OK),
    12: ([_o(1000, 100000, 2), _o(2000, 200000, 1), _o(2000, 300000, 1)], [2001], 1, 550, 1, False, -1, True, False,
         False, False, OK),
    13: (_STALLED, [1300], 300, 600, 99, True, -1, False, True, True, False, STALL),
    14: ([*_REWOUND, _o(4000, 500000, 300)], [4300], 300, 600, 99, True, 3, False, False, False, False, OK),
    15: ([*_REWOUND, _o(2500, 500000, 300)], [4300], 300, 600, 0, True, 3, False, False, False, False, REWIND),
}
"""Burrow's ``caching_test.go`` cases 0-15, as Burrow writes them (timestamps in ms, time now in s)."""
