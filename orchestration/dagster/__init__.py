"""The Dagster driver: an adapter over the core rules (``kprio_core.lifecycle``) and the runtime
(``orchestration.runtime``), with no lifecycle rule of its own.

Its modules (the assets, checks, sensor, jobs, resources, the instance, the warm run workers and ``kprio
drain``'s loop): docs/architecture.md, "orchestration: the runtime, the adapters and the drivers".
"""
