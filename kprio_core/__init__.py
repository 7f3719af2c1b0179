"""kprio_core: the planning brain and the Kafka edge of kprio.

Pure Python. Never imports Dagster or Spark (dependencies point
orchestration -> spark_jobs -> kprio_core).
"""

import logging

# A library's loggers stay silent until the program that uses it says where lines go (the kprio CLI
# does, orchestration/cli/logs.py): without a handler anywhere, Python's last resort would print
# every warning of kprio's loggers, librdkafka's connection failures among them, on stderr.
logging.getLogger("kprio").addHandler(logging.NullHandler())
