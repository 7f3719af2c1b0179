"""The output formats behind :class:`spark_jobs.tables.Output`, one module each, registered by name in
:data:`kprio_core.extras.OUTPUT_FORMATS`."""
