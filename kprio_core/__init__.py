"""kprio_core: the planning brain and the Kafka edge of kprio.

Pure Python; never imports Dagster or Spark (orchestration -> spark_jobs -> kprio_core).
"""

import logging

# Silent until the program says where lines go (orchestration/cli/logs.py): without a handler, Python's last
# resort would print every warning of kprio's loggers (librdkafka's connection failures) on stderr.
logging.getLogger("kprio").addHandler(logging.NullHandler())
