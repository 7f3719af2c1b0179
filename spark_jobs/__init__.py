"""spark_jobs: the PySpark side of kprio, in the order a batch flows through it.

- :mod:`spark_jobs.session`: one SparkSession per run (local, a master URL or Spark Connect);
- :mod:`spark_jobs.drain`: ``drain_batch``, the one drain path, driver side (no JVM access);
- :mod:`spark_jobs.source`: the ``kprio-kafka`` Python data source (records, or the fused drain);
- :mod:`spark_jobs.range_reader` / :mod:`spark_jobs.completeness`: read one offset range with
  confluent-kafka and name what is missing;
- :mod:`spark_jobs.drain_task`: one task on an executor: lanes (:mod:`spark_jobs.lane_batches`),
  the handler (:mod:`spark_jobs.lane_pump`, :mod:`spark_jobs.handler_contract`,
  :mod:`spark_jobs.handlers`), valid vs invalid (:mod:`spark_jobs.validity`), staged Parquet
  (:mod:`spark_jobs.staged_writer`, names from :mod:`spark_jobs.layout`), per-range counts;
- :mod:`spark_jobs.range_counts`: the counts and their merge into RangeStats (the conservation proof);
- :mod:`spark_jobs.output`: publish, discard, sweep, list and read the files;
- :mod:`spark_jobs.native`: the same plan driving Spark's own ``kafka`` source (the shuffle option).

Importing this package is cheap: PySpark, pyarrow and numpy are imported where they are used.
"""
