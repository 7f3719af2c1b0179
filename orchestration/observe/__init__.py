"""How kprio is watched like the services beside it: Prometheus metrics, lineage events, a terminal picture.

Each module (``metrics``, ``endpoint``, ``lineage``, ``watch``, the feed and the judging): docs/architecture.md,
"Monitoring". The rules they show (the lag verdict, freshness objectives) are pure code in ``kprio_core.verdict``
and ``kprio_core.freshness``. No module here imports an orchestrator: every driver uses them alike.
"""
