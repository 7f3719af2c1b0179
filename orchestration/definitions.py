"""The Dagster code location ``workspace.yaml`` and ``dagster dev -m orchestration.definitions`` load.

``defs`` is :func:`orchestration.dagster.definitions.build_definitions` over the configuration
found the usual way (``$KPRIO_CONFIG``, ``./kprio.yaml`` or the built-in defaults). When the instance's
``dagster.yaml`` sets kprio's run launcher, loading the code location starts the home's pool of warm
workers (:func:`orchestration.dagster.workers.server.warm_for_code_location`), so they are warm by the time
the sensor launches its first run.
"""

from __future__ import annotations

from kprio_core.config import load_config
from orchestration.dagster.definitions import build_definitions
from orchestration.dagster.workers.server import warm_for_code_location

defs = build_definitions(load_config())
warm_for_code_location()
