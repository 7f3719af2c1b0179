"""The Dagster code location ``workspace.yaml`` and ``dagster dev -m orchestration.definitions`` load.

``defs`` is built from the configuration found the usual way (``$KPRIO_CONFIG``, ``./kprio.yaml``, else defaults).
When the instance's ``dagster.yaml`` sets kprio's run launcher, loading it starts the home's warm workers
(:func:`~orchestration.dagster.workers.home.warm_for_code_location`), warm by the sensor's first run.
"""

from __future__ import annotations

from kprio_core.config import load_config
from orchestration.dagster.definitions import build_definitions
from orchestration.dagster.workers.home import warm_for_code_location

defs = build_definitions(load_config())
warm_for_code_location()
