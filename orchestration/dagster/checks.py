"""The six GX checks of a drained batch as Dagster sees them: blocking check specs of the batch asset
and one check result per outcome (the checks themselves: :mod:`orchestration.runtime.checks`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import dagster as dg

from kprio_core.model.results import CheckOutcome, CheckReport  # noqa: F401 - CheckOutcome, UNIQUE: the doctest's
from orchestration.runtime.checks import CHECK_DESCRIPTIONS, CHECK_NAMES, UNIQUE  # noqa: F401

__all__ = ["check_results", "check_specs"]


def check_specs(asset_key: dg.AssetKey | str | Sequence[str],
                partitions_def: dg.PartitionsDefinition | None = None) -> list[dg.AssetCheckSpec]:
    """The six checks as blocking specs of the batch asset (a failure stops its downstream commit).

    ``partitions_def``: record each evaluation on the run's partition (the replay's hour). Dagster's
    ``PreviewWarning`` on partitioned checks is silenced: kprio asks only the partition key of them (tested).

    >>> [(s.name, s.blocking) for s in check_specs("drained_batch")][:2]
    [('row_count_matches_plan', True), ('offsets_are_unique', True)]
    """
    key = dg.AssetKey.from_coercible(asset_key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [dg.AssetCheckSpec(name, asset=key, blocking=True, description=CHECK_DESCRIPTIONS[name],
                                  partitions_def=partitions_def)
                for name in CHECK_NAMES]


def check_results(report: CheckReport, asset_key: dg.AssetKey | str | Sequence[str]) -> list[dg.AssetCheckResult]:
    """One Dagster result per outcome: its numbers as metadata, and where it failed.

    >>> from kprio_core.model.offsets import OffsetRange
    >>> bad = CheckOutcome(UNIQUE, False, {"duplicate_rows": 1}, (OffsetRange("o-2", 0, 0, 5),))
    >>> result = check_results(CheckReport((bad,)), "drained_batch")[0]
    >>> result.passed, result.metadata["failed_ranges"].value, result.description
    (False, 'o-2[0]@[0,5)', 'offsets_are_unique failed on o-2[0]@[0,5) (duplicate_rows=1)')
    """
    key = dg.AssetKey.from_coercible(asset_key)
    results = []
    for outcome in report.outcomes:
        metadata: dict[str, Any] = dict(outcome.metadata)
        metadata["ranges_failed"] = len(outcome.failed_ranges)
        if outcome.failed_ranges:
            metadata["failed_ranges"] = dg.MetadataValue.text(", ".join(str(r) for r in outcome.failed_ranges))
        results.append(dg.AssetCheckResult(
            asset_key=key,
            check_name=outcome.name,
            passed=outcome.passed,
            metadata=metadata,
            description=CHECK_DESCRIPTIONS[outcome.name] if outcome.passed else outcome.failure(),
            severity=dg.AssetCheckSeverity.ERROR,
        ))
    return results
