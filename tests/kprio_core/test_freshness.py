"""The case table of freshness objectives (kprio_core/freshness.py): pass, warn or fail, and the likely cause.

One row per case: the oldest pending age, the facts, the outcome and cause expected, and words of its
line. The number in a case's id is the cause rule it proves (the module docstring's order); 0 are the
outcomes themselves.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from kprio_core.freshness import (
    Cause,
    Freshness,
    FreshnessFacts,
    Objective,
    evaluate_freshness,
)

OBJECTIVE = Objective(60)  # warns above 48 s
HELD = "orders-2[1] from 1200 by b-000007 (failed 3 times: disk full; fix the cause, then kprio retry b-000007)"


class Case(NamedTuple):
    why: str
    age_s: float | None
    facts: FreshnessFacts
    status: Freshness
    cause: Cause | None
    says: str


CASES = {
    "0-fresh": Case("10 s against 60 s", 10.0, FreshnessFacts(), Freshness.PASS, None,
                    "orders priority 2: oldest pending record 10 s old, objective 60 s"),
    "0-at-warn-threshold": Case("exactly 48 s: not above the threshold", 48.0, FreshnessFacts(), Freshness.PASS,
                                None, "48 s old"),
    "0-warn": Case("50 s: a fifth of the objective left", 50.0, FreshnessFacts(), Freshness.WARN, Cause.UNKNOWN,
                   "objective 60 s (warns above 48 s): likely cause: unknown"),
    "0-at-objective": Case("exactly 60 s: the objective holds", 60.0, FreshnessFacts(), Freshness.WARN,
                           Cause.UNKNOWN, "60 s old"),
    "0-fail": Case("61 s", 61.0, FreshnessFacts(), Freshness.FAIL, Cause.UNKNOWN,
                   "oldest pending record 61 s old, objective 60 s: likely cause: unknown"),
    "0-nothing-pending": Case("no age, no backlog", None, FreshnessFacts(), Freshness.PASS, None,
                              "nothing pending, objective 60 s"),
    "0-caught-up-wins": Case("backlog 0 passes whatever an old age read says", 500.0, FreshnessFacts(backlog=0),
                             Freshness.PASS, None, "nothing pending"),
    "0-age-unknown": Case("records wait, age not read: nobody can say it is fresh", None,
                          FreshnessFacts(backlog=40), Freshness.WARN, Cause.UNKNOWN, "40 records pending of unknown age"),
    "1-held": Case("a held partition names itself", 95.0, FreshnessFacts(held=(HELD,)), Freshness.FAIL, Cause.HELD,
                   f"95 s old, objective 60 s: likely cause: held partition {HELD}"),
    "1-held-several": Case("several held: the first and how many more", 95.0,
                           FreshnessFacts(held=(HELD, "orders-2[3] from 7 (offsets lost to retention)")),
                           Freshness.FAIL, Cause.HELD, "(and 1 more)"),
    "1-held-beats-everything": Case("held before throttled, busy, slow, no commit", 95.0,
                                    FreshnessFacts(held=(HELD,), throttled_s=3, busy=("b-000012",), arrival_rate=10,
                                                   drain_rate=1, since_commit_s=900), Freshness.FAIL, Cause.HELD,
                                    "held partition"),
    "2-throttled": Case("over its rate quota: kprio waits on purpose", 95.0,
                        FreshnessFacts(throttled_s=4.5, busy=("b-000012",), arrival_rate=10, drain_rate=1),
                        Freshness.FAIL, Cause.THROTTLED, "throttled by a rate quota (next batch in 4.5 s)"),
    "2-zero-throttle": Case("a throttle time of 0 is no throttle", 95.0, FreshnessFacts(throttled_s=0.0),
                            Freshness.FAIL, Cause.UNKNOWN, "unknown"),
    "3-slot-busy": Case("every slot taken by batches in flight", 55.0,
                        FreshnessFacts(busy=("b-000012", "b-000013"), arrival_rate=10, drain_rate=1), Freshness.WARN,
                        Cause.SLOT_BUSY, "slot busy (every slot taken by b-000012, b-000013)"),
    "4-slower-than-arrivals": Case("900 records/s arrive, 600 drained", 95.0,
                                   FreshnessFacts(arrival_rate=900, drain_rate=600, since_commit_s=900),
                                   Freshness.FAIL, Cause.SLOWER_THAN_ARRIVALS,
                                   "drain slower than arrivals (900 records/s arrive, 600 records/s drained)"),
    "4-keeping-up": Case("the drain outpaces arrivals: not the cause", 95.0,
                         FreshnessFacts(arrival_rate=600, drain_rate=900), Freshness.FAIL, Cause.UNKNOWN, "unknown"),
    "4-one-rate-unknown": Case("a rate unknown: cannot compare", 95.0, FreshnessFacts(arrival_rate=600),
                               Freshness.FAIL, Cause.UNKNOWN, "unknown"),
    "5-no-commit": Case("no commit for 900 s > 60 s: is the drain running?", 950.0,
                        FreshnessFacts(since_commit_s=900), Freshness.FAIL, Cause.NO_COMMIT,
                        "no commit lately (the last commit was 900 s ago: is the drain running?)"),
    "5-recent-commit": Case("committed 5 s ago: not the cause", 95.0, FreshnessFacts(since_commit_s=5),
                            Freshness.FAIL, Cause.UNKNOWN, "unknown"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_freshness(case: Case) -> None:
    r = evaluate_freshness("orders", 2, age_s=case.age_s, objective=OBJECTIVE, facts=case.facts)
    assert (r.status, r.cause) == (case.status, case.cause), f"{case.why}: {r.line}"
    assert case.says in r.line, case.why
    assert r.line.startswith("orders priority 2: ")
    assert "\n" not in r.line


def test_a_breach_names_priority_age_objective_and_cause() -> None:
    r = evaluate_freshness("payments", 0, age_s=3_600.0, objective=Objective(900, warn_fraction=0.5),
                           facts=FreshnessFacts(held=(HELD,)))
    assert r.line == (f"payments priority 0: oldest pending record 3600 s old, objective 900 s: "
                      f"likely cause: held partition {HELD}")
    assert (r.age_s, r.objective.max_age_s) == (3_600.0, 900)


def test_warn_fraction_moves_the_warning() -> None:
    assert evaluate_freshness("o", 1, age_s=40, objective=Objective(60, warn_fraction=0.5)).status is Freshness.WARN
    assert evaluate_freshness("o", 1, age_s=40, objective=Objective(60, warn_fraction=1.0)).status is Freshness.PASS


@pytest.mark.parametrize("bad", [{"max_age_s": 0}, {"max_age_s": 60, "warn_fraction": 0},
                                 {"max_age_s": 60, "warn_fraction": 1.5}])
def test_objective_refuses_nonsense(bad) -> None:
    with pytest.raises(ValueError):
        Objective(**bad)
