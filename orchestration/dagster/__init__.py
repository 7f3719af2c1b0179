"""The Dagster driver: an adapter over the core rules (``kprio_core.lifecycle``) and the runtime
(``orchestration.runtime``), with no lifecycle rule of its own.

``definitions``: the assets, checks, sensor, jobs and resources; ``sensors``: the lag sensor (one
tick of the runtime's applier); ``batch_asset``: the drain multi-asset that runs one batch through
``runtime.batch.BatchRun`` and reports its events as materializations and check results;
``checks``: the six checks as Dagster check specs; ``jobs``, ``partitions``, ``replay_asset``:
the jobs, the batch and replay partitions, the replayed window; ``runs``: the runtime's ``Runs``
port on a Dagster instance; ``tags``: Dagster's own run tags; ``resources``: plain typed
``ConfigurableResource``\\s; ``instance``, ``instance_yaml``: the Dagster instance and its
``dagster.yaml``; ``workers``: the warm run workers every run executes on, their pool and kprio's run
launcher; ``drain_loop``: ``kprio drain``'s loop, which runs the same tick in process and hands its runs to
a pool of warm workers, and what it reports (``drain_report``).
"""
