"""Sampled-window rates (Kafka's Rate over SampledStat) and throttle times, on an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from kprio_core.rate import RateQuotaTracker, SampledRate, throttle_time


def test_kafka_rate_windowing() -> None:
    """Kafka's MetricsTest.testRateWindowing: 3 samples of 30 s, 100 per window, measured at 75 s."""
    r = SampledRate(samples=3, window_s=30.0)
    r.record(100, now=0.0)
    r.record(100, now=30.0)
    assert r.total(75.0) == 200
    assert r.window_size(75.0) == pytest.approx(75.0)
    assert r.rate(75.0) == pytest.approx(200 / 75)  # 2.666...


CASES = [
    # (case, samples, window_s, records [(value, t)], now, expected window, expected rate, why)
    (1, 11, 1.0, [(100, 0.0)], 0.0, 10.0, 10.0, "fresh sensor: assume 10 empty windows before it, not 0 s"),
    (2, 11, 1.0, [(100, 0.0)], 11.0, 10.0, 0.0, "a sample 11 windows old has expired: reset, rate 0"),
    (3, 2, 1.0, [(10, 0.0), (10, 1.0)], 1.5, 1.5, 20 / 1.5, "one full window retained: elapsed time counts as is"),
    (4, 2, 1.0, [(10, 0.0), (10, 0.5)], 0.5, 1.5, 20 / 1.5, "same sample (under 1 s old): values add up"),
    (5, 2, 1.0, [(10, 0.0), (10, 1.0), (10, 2.0)], 2.5, 1.5, 20 / 1.5,
     "a third window reuses the oldest sample slot: the first 10 is gone"),
    (6, 3, 2.0, [(6, 0.0)], 1.0, 5.0, 6 / 5, "1 s elapsed + 2 missing full windows of 2 s"),
    (7, 2, 1.0, [(10, 0.0)], 1.999, 1.999, 10 / 1.999, "not expired until samples * window = 2 s"),
    (8, 1, 1.0, [(5, 3.0)], 3.0, 0.001, 5 / 0.001, "one sample at its first instant: window clamped to 1 ms"),
]


@pytest.mark.parametrize(("case", "samples", "window_s", "events", "now", "window", "rate", "why"), CASES,
                         ids=[f"rate-{c[0]}" for c in CASES])
def test_sampled_rate(case, samples, window_s, events, now, window, rate, why) -> None:
    r = SampledRate(samples, window_s)
    for value, t in events:
        r.record(value, now=t)
    assert r.window_size(now) == pytest.approx(window), why
    assert r.rate(now) == pytest.approx(rate), why


THROTTLE = [
    (1, 150.0, 100.0, 10.0, 5.0, "50% over quota over a 10 s window: 5 s"),
    (2, 100.0, 100.0, 10.0, 0.0, "exactly at quota: no wait"),
    (3, 80.0, 100.0, 10.0, 0.0, "under quota: no wait"),
    (4, 3000.0, 1000.0, 1.5, 3.0, "3x the quota over 1.5 s: 2 * 1.5"),
]


@pytest.mark.parametrize(("case", "rate", "quota", "window", "expected", "why"), THROTTLE,
                         ids=[f"throttle-{c[0]}" for c in THROTTLE])
def test_throttle_time(case, rate, quota, window, expected, why) -> None:
    assert throttle_time(rate, quota, window) == pytest.approx(expected), why


def test_throttle_needs_a_positive_quota() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        throttle_time(1.0, 0.0, 1.0)


def test_tracker_throttles_on_the_binding_quota() -> None:
    t = RateQuotaTracker(records_per_s={2: 1000.0}, bytes_per_s={2: 10_000.0, 1: 5.0}, samples=2, window_s=1.0)
    t.record_batch(2, records=1200, bytes=30_000, now=0.0)
    # window 1.5 s: 800 rec/s (under), 20000 B/s (2x): (20000 - 10000) / 10000 * 1.5
    assert t.rates(2, now=0.5) == pytest.approx((800.0, 20_000.0))
    assert t.throttle_time(2, now=0.5) == pytest.approx(1.5)
    assert t.throttle_time(0, now=0.5) == 0.0, "no quota, never throttled"
    assert t.throttle_time(1, now=0.5) == 0.0, "nothing drained yet"
    # after the window expires the priority may drain again
    assert t.throttle_time(2, now=2.0) == 0.0


def test_tracker_state_round_trips_through_json() -> None:
    t = RateQuotaTracker(records_per_s={2: 100.0, 0: 10.0}, samples=3, window_s=2.0)
    for i in range(5):
        t.record_batch(2, records=150, bytes=1, now=i * 0.7)
        t.record_batch(0, records=30, bytes=1, now=i * 0.7 + 0.1)
    stored = TypeAdapter(RateQuotaTracker)
    again = stored.validate_json(stored.dump_json(t))
    # 750 records over 3.0 s elapsed + 1 missing window of 2 s = 150/s against 100/s: 0.5 * 5 s
    assert t.throttle_time(2, 3.0) == pytest.approx(2.5)
    for now in (3.0, 4.5, 9.0):  # time only moves forward, as a sensor's clock does
        assert again.throttle_time(2, now) == t.throttle_time(2, now)
        assert again.throttle_time(0, now) == t.throttle_time(0, now)


def test_invalid_settings() -> None:
    with pytest.raises(ValueError, match="at least 1 sample"):
        SampledRate(0, 1.0)
    with pytest.raises(ValueError, match="window must be > 0"):
        SampledRate(2, 0.0)
    with pytest.raises(ValueError, match="priority 1 must be > 0 records/s"):
        RateQuotaTracker(records_per_s={1: 0})
    with pytest.raises(ValueError, match="at least 1 sample"):
        TypeAdapter(SampledRate).validate_python({"samples": 0})


@given(
    samples=st.integers(1, 12),
    window_s=st.floats(0.01, 60),
    events=st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 5)), max_size=40),
    quota=st.floats(0.1, 1e6),
)
def test_rate_properties(samples, window_s, events, quota) -> None:
    r = SampledRate(samples, window_s)
    now = 0.0
    for value, gap in events:
        now += gap
        r.record(value, now)
    rate = r.rate(now)
    assert rate >= 0
    window = r.window_size(now)
    assert window >= (samples - 1) * window_s * (1 - 1e-9) and window >= 0.001, "never less than N-1 windows"
    assert r.total(now) <= sum(v for v, _ in events) * (1 + 1e-9) + 1e-6
    wait = throttle_time(rate, quota, r.window_size(now))
    assert (wait > 0) == (rate > quota)
