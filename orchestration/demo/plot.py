"""The demo's plot: backlog per priority before each batch, and after the last one (PNG).

The points come from the ledger (each plan keeps its backlog): no broker call. Batch 3, planned from
``{2: 150, 1: 125, 0: 350}``, gives the points at x = 2 (0-based); the backlog after the last batch is the last:

>>> from types import SimpleNamespace as Fake
>>> before = [{2: 300, 1: 200, 0: 400}, {2: 220, 1: 160, 0: 380}, {2: 150, 1: 125, 0: 350}]
>>> batches = [Fake(batch_id=f"b-00000{i}", plan=Fake(backlog_before=b)) for i, b in enumerate(before, 1)]
>>> backlog_series(reversed(batches), after={0: 90}, priorities=3)
{2: [300, 220, 150, 0], 1: [200, 160, 125, 0], 0: [400, 380, 350, 90]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kprio_core.model.priority import Priority, most_urgent_first
from orchestration.demo.workload import TIERS

if TYPE_CHECKING:
    from kprio_core.ledger import Batch


def backlog_series(batches: Iterable[Batch], after: Mapping[Priority, int], priorities: int) -> dict[Priority, list[int]]:
    """Backlog per priority before batch 1, 2, ... and, last, ``after`` the final batch."""
    from kprio_core.ledger import parse_batch_id

    ordered = sorted(batches, key=lambda b: parse_batch_id(b.batch_id) or 0)
    series: dict[Priority, list[int]] = {p: [] for p in most_urgent_first(priorities)}
    for batch in ordered:
        for p in series:
            series[p].append(int(batch.plan.backlog_before.get(p, 0)))
    for p in series:
        series[p].append(int(after.get(p, 0)))
    return series


def plot_backlog(series: Mapping[Priority, Sequence[int]], out: Path, *, title: str,
                 arrivals: Mapping[int, str] | None = None) -> Path:
    """Write the backlog lines to ``out``; ``arrivals`` marks batches before which a wave arrived."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p, values in series.items():
        xs = list(range(1, len(values) + 1))
        ax.plot(xs, values, marker="o", markersize=3, label=f"priority {p} ({TIERS.get(p, p)})")
    for batch_no, label in sorted((arrivals or {}).items()):
        ax.axvline(batch_no, color="grey", linestyle=":", linewidth=1)
        ax.annotate(label, (batch_no, 1), xycoords=("data", "axes fraction"), rotation=90, va="top",
                    ha="right", fontsize=7, color="grey")
    n = max((len(v) for v in series.values()), default=1)
    ax.set_xticks(range(1, n + 1), [str(i) for i in range(1, n)] + ["end"])
    ax.set_xlabel("before batch")
    ax.set_ylabel("backlog (records)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=110)
    plt.close(fig)
    return out
