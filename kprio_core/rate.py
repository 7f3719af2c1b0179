"""Rate quotas measured as Kafka measures them: a sampled window, and a throttle time.

:class:`SampledRate` follows ``org.apache.kafka.common.metrics.stats.Rate`` over a ``WindowedSum``: ``samples`` windows
of ``window_s`` s, the next started once the current is ``window_s`` old, expired ones reset before measuring; it
divides by the time since the oldest sample started, at least ``samples - 1`` windows (a fresh sensor reports no huge
rate after one record). Throttle time is Kafka's ``ClientQuotaManager``: ``(rate - quota) / quota * window``, the
window the rate used. Time is a parameter (``now`` in seconds from any fixed origin): nothing here reads a clock.
2 samples of 1 s, 100 records at t=0, 100 more at t=1.5: the window is 1.5 s, so 133.3 rec/s; against a quota of
100 rec/s that is (133.3 - 100) / 100 * 1.5 = 0.5 s of throttle.

>>> r = SampledRate(samples=2, window_s=1.0)
>>> r.record(100, now=0.0); r.record(100, now=1.5)
>>> round(r.rate(now=1.5), 1), r.window_size(now=1.5)
(133.3, 1.5)
>>> round(throttle_time(r.rate(1.5), quota=100, window_s=r.window_size(1.5)), 3)
0.5
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kprio_core.model.priority import Priority

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


@dataclass(slots=True)
class Sample:
    """One sample of a :class:`SampledRate`: when it started, the sum recorded in it, and how many records."""

    start: float
    value: float = 0.0
    events: int = 0

    def reset(self, now: float) -> None:
        self.start, self.value, self.events = now, 0.0, 0


@dataclass
class SampledRate:
    """Recorded values per second over ``samples`` windows of ``window_s`` s; plain data ``pydantic`` can store.

    >>> from pydantic import TypeAdapter
    >>> r = SampledRate(2, 1.0); r.record(5, now=3.0)
    >>> TypeAdapter(SampledRate).dump_python(r, mode="json")
    {'samples': 2, 'window_s': 1.0, 'current': 0, 'data': [{'start': 3.0, 'value': 5.0, 'events': 1}]}
    """

    samples: int = DEFAULT_SAMPLES
    window_s: float = DEFAULT_WINDOW_S
    current: int = 0
    data: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"a sampled rate needs at least 1 sample, got {self.samples}")
        if self.window_s <= 0:
            raise ValueError(f"a sample window must be > 0 s, got {self.window_s}")
        self.window_s = float(self.window_s)
        self.current = self.current if self.current < len(self.data) else 0

    def _current_sample(self, now: float) -> Sample:
        if not self.data:
            self.data.append(Sample(now))
        return self.data[self.current]

    def _advance(self, now: float) -> Sample:
        self.current = (self.current + 1) % self.samples
        if self.current >= len(self.data):
            self.data.append(Sample(now))
        else:
            self.data[self.current].reset(now)
        return self.data[self.current]

    def _purge_obsolete(self, now: float) -> None:
        expire_age = self.samples * self.window_s
        for sample in self.data:
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
        return sum(s.value for s in self.data)

    def window_size(self, now: float) -> float:
        """Seconds the rate divides by: since the oldest live sample, at least ``samples - 1`` windows.

        >>> r = SampledRate(samples=3, window_s=2.0)
        >>> r.record(1, now=10.0)
        >>> r.window_size(10.5), r.window_size(15.0)
        (4.5, 5.0)
        """
        self._purge_obsolete(now)
        if not self.data:
            self.data.append(Sample(now))
        elapsed = now - min(s.start for s in self.data)
        full_windows = int(elapsed // self.window_s)
        min_full_windows = self.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.window_s
        return max(elapsed, MIN_WINDOW_S)

    def rate(self, now: float) -> float:
        """Values per second at ``now``."""
        window = self.window_size(now)
        return self.total(now) / window


@dataclass
class RateQuotaTracker:
    """Per-priority drained records/s and bytes/s against optional quotas (none: never throttled; the larger throttle
    wins); plain data too.

    >>> t = RateQuotaTracker(records_per_s={2: 1000}, bytes_per_s={2: 50_000}, samples=2, window_s=1.0)
    >>> t.record_batch(2, records=3000, bytes=60_000, now=0.0)
    >>> t.rates(2, now=0.5)   # over 0.5 s elapsed + 1 missing full window = 1.5 s
    (2000.0, 40000.0)
    >>> t.throttle_time(2, now=0.5)   # records bind: (2000 - 1000) / 1000 * 1.5 s
    1.5
    >>> t.throttle_time(1, now=0.5)
    0.0
    """

    records_per_s: dict[Priority, float] = field(default_factory=dict)
    bytes_per_s: dict[Priority, float] = field(default_factory=dict)
    samples: int = DEFAULT_SAMPLES
    window_s: float = DEFAULT_WINDOW_S
    record_rates: dict[Priority, SampledRate] = field(default_factory=dict)
    byte_rates: dict[Priority, SampledRate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.records_per_s = {int(p): float(q) for p, q in self.records_per_s.items()}
        self.bytes_per_s = {int(p): float(q) for p, q in self.bytes_per_s.items()}
        for kind, quotas in (("records/s", self.records_per_s), ("bytes/s", self.bytes_per_s)):
            for p, q in quotas.items():
                if q <= 0:
                    raise ValueError(f"rate quota of priority {p} must be > 0 {kind}, got {q}")
        self.window_s = float(self.window_s)

    def _rate(self, table: dict[Priority, SampledRate], priority: Priority) -> SampledRate:
        if priority not in table:
            table[priority] = SampledRate(self.samples, self.window_s)
        return table[priority]

    def record_batch(self, priority: Priority, records: int, bytes: int, now: float) -> None:
        """Count a drained batch of one priority at time ``now``."""
        self._rate(self.record_rates, priority).record(records, now)
        self._rate(self.byte_rates, priority).record(bytes, now)

    def rates(self, priority: Priority, now: float) -> tuple[float, float]:
        """(records/s, bytes/s) of one priority at ``now``."""
        return (
            self._rate(self.record_rates, priority).rate(now),
            self._rate(self.byte_rates, priority).rate(now),
        )

    def throttle_time(self, priority: Priority, now: float) -> float:
        """Seconds the priority must wait before its next batch (0 when under every quota)."""
        waits = [0.0]
        for quotas, table in ((self.records_per_s, self.record_rates), (self.bytes_per_s, self.byte_rates)):
            if priority in quotas:
                rate = self._rate(table, priority)
                waits.append(throttle_time(rate.rate(now), quotas[priority], rate.window_size(now)))
        return max(waits)
