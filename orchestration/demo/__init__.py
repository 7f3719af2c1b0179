"""The one-command demo: embedded broker, a realistic workload, the Dagster drain, a report and a plot.

``run_demo`` (:mod:`orchestration.demo.run`) does it all; ``kprio demo`` is its command.
"""

from kprio_core.errors import KprioError


class DemoFailed(KprioError):
    """The demo could not run as designed (another producer on its topics, a drain that stopped early)."""

    code = "demo_failed"
