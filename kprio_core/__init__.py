"""kprio_core: the planning brain and the Kafka edge of kprio.

Pure Python. Never imports Dagster or Spark (dependencies point
orchestration -> spark_jobs -> kprio_core).
"""
