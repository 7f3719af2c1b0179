"""How kprio is watched like the services beside it: Prometheus metrics, lineage events, a terminal picture.

The modules: docs/architecture.md, "Monitoring". The rules they show are pure code (``kprio_core.verdict``,
``kprio_core.freshness``); no module here imports an orchestrator: every driver uses them alike.
"""
