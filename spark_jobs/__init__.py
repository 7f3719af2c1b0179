"""spark_jobs: the PySpark side of kprio, from a batch's plan to its staged files and per-range stats.

What each module does: docs/architecture.md, "spark_jobs: the drain on the executors". Importing this
package is cheap: PySpark, pyarrow and numpy are imported where they are used.
"""
