"""Record values in the schema registry's wire format, decoded into typed Arrow columns.

Floors: the pure parts (wire, kinds, avro_columns) at the bottom, the registry adapter with its I/O beside them,
the executors' decoders (avro, json_schema, protobuf) on top. Nothing imports Spark: decoders take and give Arrow.
"""
