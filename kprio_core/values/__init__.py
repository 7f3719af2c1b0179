"""Record values in the schema registry's wire format, decoded into typed Arrow columns.

Floors, as in the rest of kprio_core: the pure parts (:mod:`~kprio_core.values.wire`, the header of
a value; :mod:`~kprio_core.values.kinds`, the column type names; :mod:`~kprio_core.values.avro_columns`,
an Avro schema's columns) at the bottom, the registry adapter with its I/O
(:mod:`~kprio_core.values.registry`) beside them, and :mod:`~kprio_core.values.avro`, the decoder the
drain's executors run, on top. Nothing here imports Spark: the decoder takes and gives Arrow arrays.
"""
