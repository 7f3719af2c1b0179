"""Rate quotas measured as Kafka measures them: a sampled window, and a throttle time.

:class:`SampledRate` follows ``org.apache.kafka.common.metrics.stats.Rate`` over a
``WindowedSum`` (``SampledStat``): ``samples`` windows of ``window_s`` seconds each; a record goes
to the current sample, or starts the next one when the current one is ``window_s`` old; samples
older than ``samples * window_s`` are reset before measuring; the rate divides the sum by the
time since the oldest sample started, but never by less than ``samples - 1`` full windows (so a
fresh sensor does not report a huge rate after one record). Throttle time is Kafka's
``ClientQuotaManager``: ``(rate - quota) / quota * window``, with the window the rate used.

Time is a parameter (``now`` in seconds from any fixed origin): nothing here reads a clock.

2 samples of 1 s, 100 records at t=0, 100 more at t=1.5: the window is 1.5 s, so 133.3 rec/s;
against a quota of 100 rec/s that is (133.3 - 100) / 100 * 1.5 = 0.5 s of throttle.

>>> r = SampledRate(samples=2, window_s=1.0)
>>> r.record(100, now=0.0); r.record(100, now=1.5)
>>> round(r.rate(now=1.5), 1), r.window_size(now=1.5)
(133.3, 1.5)
>>> round(throttle_time(r.rate(1.5), quota=100, window_s=r.window_size(1.5)), 3)
0.5
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kprio_core.priority import Priority

DEFAULT_SAMPLES = 11
"""Kafka's quota.window.num default."""
DEFAULT_WINDOW_S = 1.0
"""Kafka's quota.window.size.seconds default."""
MIN_WINDOW_S = 0.001
"""Newer Kafka clamps a zero window to 1 ms rather than dividing by zero; so do we."""


def throttle_time(rate: float, quota: float, window_s: float) -> float:
    """Seconds to wait so that ``rate`` over ``window_s`` falls back to ``quota`` (0 when under).

    >>> throttle_time(150.0, 100.0, 10.0), throttle_time(80.0, 100.0, 10.0)
    (5.0, 0.0)
    """
    if quota <= 0:
        raise ValueError(f"a rate quota must be > 0, got {quota}")
    if rate <= quota:
        return 0.0
    return (rate - quota) / quota * window_s


@dataclass
class _Sample:
    start: float
    value: float = 0.0
    events: int = 0

    def reset(self, now: float) -> None:
        self.start, self.value, self.events = now, 0.0, 0


class SampledRate:
    """Sum of recorded values per second over ``samples`` windows of ``window_s`` seconds."""

    def __init__(self, samples: int = DEFAULT_SAMPLES, window_s: float = DEFAULT_WINDOW_S) -> None:
        if samples < 1:
            raise ValueError(f"a sampled rate needs at least 1 sample, got {samples}")
        if window_s <= 0:
            raise ValueError(f"a sample window must be > 0 s, got {window_s}")
        self.samples = samples
        self.window_s = float(window_s)
        self._samples: list[_Sample] = []
        self._current = 0

    def _current_sample(self, now: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now))
        return self._samples[self._current]

    def _advance(self, now: float) -> _Sample:
        self._current = (self._current + 1) % self.samples
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now))
        else:
            self._samples[self._current].reset(now)
        return self._samples[self._current]

    def _purge_obsolete(self, now: float) -> None:
        expire_age = self.samples * self.window_s
        for sample in self._samples:
            if now - sample.start >= expire_age:
                sample.reset(now)

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at time ``now`` (a new sample starts when the current one is full)."""
        sample = self._current_sample(now)
        if now - sample.start >= self.window_s:
            sample = self._advance(now)
        sample.value += value
        sample.events += 1

    def total(self, now: float) -> float:
        """Sum of the values still inside the window at ``now``."""
        self._purge_obsolete(now)
        return sum(s.value for s in self._samples)

    def window_size(self, now: float) -> float:
        """Seconds the rate divides by: since the oldest live sample, at least ``samples - 1`` windows.

        >>> r = SampledRate(samples=3, window_s=2.0)
        >>> r.record(1, now=10.0)
        >>> r.window_size(10.5), r.window_size(15.0)
        (4.5, 5.0)
        """
        self._purge_obsolete(now)
        if not self._samples:
            self._samples.append(_Sample(now))
        elapsed = now - min(s.start for s in self._samples)
        full_windows = int(elapsed // self.window_s)
        min_full_windows = self.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.window_s
        return max(elapsed, MIN_WINDOW_S)

    def rate(self, now: float) -> float:
        """Values per second at ``now``."""
        window = self.window_size(now)
        return self.total(now) / window

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "window_s": self.window_s,
            "current": self._current,
            "data": [[s.start, s.value, s.events] for s in self._samples],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SampledRate:
        """Inverse of :meth:`to_dict`.

        >>> r = SampledRate(2, 1.0); r.record(5, now=3.0)
        >>> SampledRate.from_dict(r.to_dict()).rate(3.5) == r.rate(3.5)
        True
        """
        rate = cls(int(d["samples"]), float(d["window_s"]))
        rate._samples = [_Sample(float(a), float(v), int(e)) for a, v, e in d.get("data", [])]
        rate._current = int(d.get("current", 0)) if rate._samples else 0
        return rate


class RateQuotaTracker:
    """Per-priority rates of drained records/s and bytes/s, checked against optional quotas.

    A priority without a quota is never throttled. The throttle time is the larger of the
    records and bytes throttles.

    >>> t = RateQuotaTracker(records_per_s={2: 1000}, bytes_per_s={2: 50_000}, samples=2, window_s=1.0)
    >>> t.record_batch(2, records=3000, bytes=60_000, now=0.0)
    >>> t.rates(2, now=0.5)   # over 0.5 s elapsed + 1 missing full window = 1.5 s
    (2000.0, 40000.0)
    >>> t.throttle_time(2, now=0.5)   # records bind: (2000 - 1000) / 1000 * 1.5 s
    1.5
    >>> t.throttle_time(1, now=0.5)
    0.0
    """

    def __init__(
        self,
        records_per_s: Mapping[Priority, float] | None = None,
        bytes_per_s: Mapping[Priority, float] | None = None,
        samples: int = DEFAULT_SAMPLES,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        self.records_per_s = {int(p): float(q) for p, q in (records_per_s or {}).items()}
        self.bytes_per_s = {int(p): float(q) for p, q in (bytes_per_s or {}).items()}
        for kind, quotas in (("records/s", self.records_per_s), ("bytes/s", self.bytes_per_s)):
            for p, q in quotas.items():
                if q <= 0:
                    raise ValueError(f"rate quota of priority {p} must be > 0 {kind}, got {q}")
        self.samples, self.window_s = samples, float(window_s)
        self._records: dict[Priority, SampledRate] = {}
        self._bytes: dict[Priority, SampledRate] = {}

    def _rate(self, table: dict[Priority, SampledRate], priority: Priority) -> SampledRate:
        if priority not in table:
            table[priority] = SampledRate(self.samples, self.window_s)
        return table[priority]

    def record_batch(self, priority: Priority, records: int, bytes: int, now: float) -> None:
        """Count a drained batch of one priority at time ``now``."""
        self._rate(self._records, priority).record(records, now)
        self._rate(self._bytes, priority).record(bytes, now)

    def rates(self, priority: Priority, now: float) -> tuple[float, float]:
        """(records/s, bytes/s) of one priority at ``now``."""
        return (
            self._rate(self._records, priority).rate(now),
            self._rate(self._bytes, priority).rate(now),
        )

    def throttle_time(self, priority: Priority, now: float) -> float:
        """Seconds the priority must wait before its next batch (0 when under every quota)."""
        waits = [0.0]
        for quotas, table in ((self.records_per_s, self._records), (self.bytes_per_s, self._bytes)):
            if priority in quotas:
                rate = self._rate(table, priority)
                waits.append(throttle_time(rate.rate(now), quotas[priority], rate.window_size(now)))
        return max(waits)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able state (quotas, settings and samples) for a sensor cursor or the ledger."""
        return {
            "records_per_s": {str(p): q for p, q in self.records_per_s.items()},
            "bytes_per_s": {str(p): q for p, q in self.bytes_per_s.items()},
            "samples": self.samples,
            "window_s": self.window_s,
            "records": {str(p): r.to_dict() for p, r in self._records.items()},
            "bytes": {str(p): r.to_dict() for p, r in self._bytes.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RateQuotaTracker:
        tracker = cls(
            {int(p): q for p, q in d.get("records_per_s", {}).items()},
            {int(p): q for p, q in d.get("bytes_per_s", {}).items()},
            int(d.get("samples", DEFAULT_SAMPLES)),
            float(d.get("window_s", DEFAULT_WINDOW_S)),
        )
        tracker._records = {int(p): SampledRate.from_dict(r) for p, r in d.get("records", {}).items()}
        tracker._bytes = {int(p): SampledRate.from_dict(r) for p, r in d.get("bytes", {}).items()}
        return tracker
