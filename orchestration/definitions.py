"""The Dagster code location ``workspace.yaml`` and ``dagster dev -m orchestration.definitions`` load.

``defs`` is :func:`orchestration.dagster.definitions.build_definitions` over the configuration
found the usual way (``$KPRIO_CONFIG``, ``./kprio.yaml`` or the built-in defaults).
"""

from __future__ import annotations

from kprio_core.config import load_config
from orchestration.dagster.definitions import build_definitions

defs = build_definitions(load_config())
