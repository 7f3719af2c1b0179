"""orchestration: what carries kprio's lifecycle out.

``runtime`` (orchestrator-free: the tick's applier, a batch's run, leases, commits, checks), the drivers ``dagster``
(with the ``kprio drain`` loop) and ``airflow``, ``cli`` (``kprio``), ``observe`` (monitoring), ``services`` (local
Kafka, Spark Connect, schema registry), ``demo``; ``definitions``: the code location ``workspace.yaml`` loads.
"""
