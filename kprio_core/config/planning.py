"""The sections of the planner and of what a batch does with its records: ``planner``, ``quality``, ``recovery``,
``splits``, ``rate``, ``ordering``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kprio_core.config.base import Section
from kprio_core.lanes import Ordering
from kprio_core.model.drain_plan import PlanMode
from kprio_core.model.priority import Priority
from kprio_core.quota import Distribution


class RateQuota(Section):
    """A rate limit for one priority; either or both bounds."""

    records_per_s: float | None = Field(None, gt=0, description="Most records per second drained for this priority.")
    bytes_per_s: float | None = Field(None, gt=0, description="Most bytes per second drained for this priority.")


class PlannerSettings(Section):
    """Budgets and the burst rule."""

    record_budget: int = Field(1_000_000, ge=1, description="Most records one batch may plan.")
    byte_budget: int | None = Field(256 * 1024 * 1024, ge=1, description="Most estimated bytes one batch may plan.")
    mode: PlanMode = Field(PlanMode.LAG_AWARE, description="Burst mode.")
    distribution: Distribution = Field(Distribution.EXP, description="Split of the budget into base quotas.")
    min_share: float = Field(
        0.05, ge=0, le=1, description="Guaranteed fraction of the budget for every priority with backlog."
    )
    window_size: int = Field(6, ge=1, description="Poll-history window (batches) of the flipkart burst rule.")
    maxed_out_threshold: int = Field(4, ge=1, description="Maxed-out batches in the window that allow a burst.")
    max_in_flight: int = Field(
        1, ge=1, description="Batches in flight at once per priority of a logical topic (a batch takes a slot of "
        "every priority it drains), so an urgent batch never waits for a bulk one."
    )
    target_batch_s: float | None = Field(
        2.0, gt=0, description="Size batches to drain in about this many seconds, from the throughput the ledger "
        "measured (never above record_budget; a backlog's tail shorter than a batch's fixed cost joins, up to twice "
        "this); null: record_budget alone."
    )

    @model_validator(mode="after")
    def _threshold_fits_window(self) -> PlannerSettings:
        if self.maxed_out_threshold > self.window_size:
            raise ValueError(
                f"maxed_out_threshold ({self.maxed_out_threshold}) cannot exceed window_size ({self.window_size})"
            )
        return self


class QualitySettings(Section):
    """Which records are invalid, where they go, and how many a batch may have."""

    invalid: Literal["quarantine", "block"] = Field(
        "quarantine", description="quarantine: invalid records go to the dead-letter output and the batch commits "
        "(up to max_invalid_ratio); block: any invalid record fails its partition's range."
    )
    max_invalid_ratio: float = Field(
        0.05, ge=0, le=1, description="Most invalid records per range, as a fraction, before the range fails and "
        "holds its partition (a schema change, a broken producer)."
    )
    ratio_floor_records: int = Field(
        100, ge=1, description="Ranges shorter than this are measured as if they had this many records, so one bad "
        "record in a short range is quarantined, not blocking."
    )
    tombstones: Literal["record", "invalid"] = Field(
        "record", description="A null value: a record (fields null, required fields not enforced) or invalid."
    )
    null_keys: Literal["record", "invalid"] = Field("record", description="A null key: a record, or invalid.")


class RecoverySettings(Section):
    """How crashed and failed batches are detected and retried without an operator."""

    lease_s: float = Field(
        30.0, gt=0, description="A batch's run renews its lease this often x3; a lease not renewed for this long "
        "means the run died and its batch is retried."
    )
    max_attempts: int = Field(
        3, ge=1, description="Attempts of a batch (the first included) before its partitions wait for an operator."
    )
    backoff_s: float = Field(5.0, ge=0, description="Wait before the first retry; doubles per attempt.")
    backoff_max_s: float = Field(60.0, ge=0, description="Longest wait between two attempts (at least backoff_s).")

    @model_validator(mode="after")
    def _longest_wait_not_shorter_than_the_first(self) -> RecoverySettings:
        if self.backoff_max_s < self.backoff_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s:g}) is shorter than backoff_s ({self.backoff_s:g}): "
                             f"the longest wait cannot be shorter than the first")
        return self


class SplitSettings(Section):
    """Bounds of one Spark input split."""

    max_records: int = Field(100_000, ge=1, description="Most records in one Spark input split (like maxRecordsPerPartition).")
    max_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Most estimated bytes in one Spark input split.")


class RateSettings(Section):
    """Rate quotas per priority, measured over sampled windows (Kafka's SampledStat)."""

    samples: int = Field(11, ge=2, description="Number of samples (Kafka's quota.window.num).")
    window_s: float = Field(1.0, gt=0, description="Length of one sample (quota.window.size.seconds).")
    quotas: dict[Priority, RateQuota] = Field(default_factory=dict, description="Per priority; absent = unlimited.")


class OrderingSettings(Section):
    """How records of a partition are handed to the handler."""

    mode: Ordering = Field(Ordering.PARTITION, description="partition: one lane; key: lanes by key hash.")
    lanes: int = Field(1, ge=1, le=1024, description="Lanes per partition in key mode.")

    @model_validator(mode="after")
    def _lanes_match_mode(self) -> OrderingSettings:
        if self.mode is Ordering.PARTITION and self.lanes != 1:
            raise ValueError("ordering.lanes > 1 needs ordering.mode 'key'")
        return self
