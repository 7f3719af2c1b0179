"""The Airflow pool of kprio's drain and commit tasks, without importing Airflow (``kprio airflow init`` sizes it).

>>> from kprio_core.config import parse_config
>>> pool_slots(parse_config({"topics": [{"name": "orders", "priorities": 3}], "planner": {"max_in_flight": 2}},
...                         "doc", env={}))
6
"""

from __future__ import annotations

from kprio_core.config import KprioConfig

POOL = "kprio_drain"
"""The pool of the drain and commit tasks (and of the re-drain and the replay)."""


def pool_slots(config: KprioConfig) -> int:
    """The size of :data:`POOL`: every batch a priority may have in flight, for the topic with the most priorities."""
    return config.planner.max_in_flight * max((t.priorities for t in config.topics), default=1)
