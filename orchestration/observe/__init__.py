"""How kprio is watched like the services beside it: Prometheus metrics, lineage events, a terminal picture.

``metrics``: kprio's metrics in a prometheus-client registry and the functions that update them from plain
values; ``endpoint``: the HTTP endpoint a Prometheus server scrapes (loopback unless told otherwise);
``lineage``: an OpenLineage run event per committed batch, through openlineage-python's transports (off by
default); ``watch``: the per-priority backlog, age, verdict and freshness as a rich table, redrawn live.
The rules they show (the lag verdict, freshness objectives) are pure code in ``kprio_core.verdict`` and
``kprio_core.freshness``. No module here imports an orchestrator: every driver uses them alike.
"""
