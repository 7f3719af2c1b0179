"""Airflow 3 drives the same drainer: DAGs built from kprio.yaml over the shared runtime (the ``airflow`` extra).

- :mod:`orchestration.airflow.dags`: ``kprio_dags()`` for a dags folder (``kprio airflow init`` writes the file);
- :mod:`orchestration.airflow.trigger`: deferrable lag sensing on the triggerer;
- :mod:`orchestration.airflow.tasks`: what each task does, through :mod:`orchestration.runtime`.
"""
