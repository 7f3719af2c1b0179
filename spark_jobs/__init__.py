"""spark_jobs: the PySpark side of kprio.

- :mod:`spark_jobs.datasource`: the ``kprio-kafka`` Python data source reading explicit offset
  ranges with confluent-kafka on the executors (one input partition per planned split);
- :mod:`spark_jobs.native`: the same plan driving Spark's own ``kafka`` source;
- :mod:`spark_jobs.drain`: the drain job (read, check completeness, lanes, handler, staged write);
- :mod:`spark_jobs.drain_source`: the ``kprio-drain`` source, the drain's fused path (read, lanes
  and handler in one Python pass per topic partition), with :mod:`spark_jobs.lane_pump` feeding
  each lane's handler call;
- :mod:`spark_jobs.session`: one SparkSession per run (local, a master URL or Spark Connect).

Importing this package is cheap: PySpark is imported inside the modules that need it.
"""
