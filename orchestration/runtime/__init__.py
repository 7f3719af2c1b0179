"""The runtime that carries a batch's lifecycle out, free of any orchestrator's rules.

``tick``: gathers a tick's inputs once, asks the core rules (``kprio_core.lifecycle``) what to do,
and carries the actions out with one applier that every driver uses (the Dagster sensor,
``kprio drain``, ``plan_batch_job``, ``kprio plan``'s preview).
"""
