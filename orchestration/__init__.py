"""orchestration: what carries kprio's lifecycle out.

``runtime``: the orchestrator-free runtime (the tick's applier, one run of a batch, leases,
commits, checks); ``dagster``: the Dagster driver (code location, sensor, assets, jobs, the
``kprio drain`` loop); ``cli``: the ``kprio`` operator CLI; ``services``: the local Kafka broker
and Spark Connect server; ``demo``: ``kprio demo``. ``definitions``: the code location
``workspace.yaml`` loads.
"""
