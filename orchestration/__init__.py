"""orchestration: the Dagster code location of kprio (resources, sensors, assets, checks, jobs)
and the ``kprio`` operator CLI, which sits on top of everything."""
