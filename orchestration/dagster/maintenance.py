"""``tables_maintenance_job`` and its schedule: the Delta and Iceberg tables kept healthy as scheduled work.

The job's op runs :func:`orchestration.runtime.maintenance.maintain_tables` for every logical topic (or those its
config names); the figures before and after are its output metadata (totals Dagster plots, one line per table).
The schedule is on by default when ``drain.format`` is ``delta`` or ``iceberg`` (Parquet has no table; the job
says so and touches nothing). A compaction is its own transaction, planned again when a publish lands meanwhile:
batches in flight keep draining.
"""

import dagster as dg
from pydantic import Field

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError
from orchestration.dagster.resources import KprioSettings
from spark_jobs.tables import output_of

JOB = "tables_maintenance_job"
SCHEDULE = "tables_maintenance_schedule"


class MaintenanceConfig(dg.Config):
    """Which logical topics' tables to maintain."""

    topics: list[str] | None = Field(default=None, description="Logical topics (default: every one in kprio.yaml).")


@dg.op(description="Compact the small files of the Delta or Iceberg tables, checkpoint and vacuum (Delta), expire "
       "old snapshots (Iceberg) within drain.maintenance; the figures before and after as metadata.")
def maintain_tables_op(context: dg.OpExecutionContext, config: MaintenanceConfig, kprio: KprioSettings) -> dict:
    from orchestration.runtime.maintenance import maintain_tables

    settings = kprio.config()
    known = [t.name for t in settings.topics]
    unknown = sorted(set(config.topics or []) - set(known))
    if unknown:
        raise dg.Failure(description=f"no logical topic named {', '.join(unknown)} in kprio.yaml (it has "
                         f"{', '.join(known)})")
    try:
        report = maintain_tables(settings, config.topics)
    except KprioError as err:
        raise dg.Failure(description=str(err)) from None
    for line in report.lines():
        context.log.info(line)
    context.add_output_metadata({
        "format": report.format, "tables": len(report.tables), "seconds": round(report.seconds, 3),
        **report.totals(),
        "per_table": dg.MetadataValue.md("\n".join(f"- {line}" for line in report.lines())),
    })
    return report.to_dict()


@dg.job(name=JOB, executor_def=dg.in_process_executor,
        description="Maintain the Delta or Iceberg tables (compaction, vacuum or snapshot expiry within "
        "drain.maintenance); launched by tables_maintenance_schedule.")
def tables_maintenance_job() -> None:
    maintain_tables_op()


def build_maintenance_schedule(config: KprioConfig) -> dg.ScheduleDefinition:
    """The job on ``drain.maintenance.schedule`` (UTC); running by default for the table formats."""
    tables = output_of(config.drain).tables
    return dg.ScheduleDefinition(
        name=SCHEDULE, job=tables_maintenance_job, cron_schedule=config.drain.maintenance.schedule,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING if tables else dg.DefaultScheduleStatus.STOPPED,
        description=f"Maintain the {config.drain.format.value} tables on {config.drain.maintenance.schedule} (UTC).",
    )
