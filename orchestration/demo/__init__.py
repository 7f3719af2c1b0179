"""The one-command demo: embedded broker, a realistic workload, the Dagster drain, a report and a plot.

``run_demo`` (in :mod:`orchestration.demo.run`) does it all; ``kprio demo`` is its command.
Modules: layout (data dir and the demo's kprio.yaml), producer (waves into Kafka, with the
offsets each wave got), report (waits, checks, conservation, the table), plot (backlog per
priority over batches), progress (rich bars while it works).
"""

from kprio_core.errors import KprioError


class DemoFailed(KprioError):
    """The demo could not run as designed (another producer on its topics, a drain that stopped early)."""

    code = "demo_failed"
