"""The runtime that carries a batch's lifecycle out, free of any orchestrator's rules.

``tick``: gathers a tick's inputs once, asks the core rules (``kprio_core.lifecycle.tick``) what to
do, and carries the actions out with one applier that every driver uses (the Dagster sensor,
``kprio drain``, ``plan_batch_job``, ``kprio plan``'s preview). ``batch``: one run of one batch
(take -> drain -> isolate -> check -> publish -> commit, with its lease and heartbeat), steered by
the core's run rules (``kprio_core.lifecycle.run``) and reporting typed events a driver turns
into its own (Dagster materializations and check results).
"""
