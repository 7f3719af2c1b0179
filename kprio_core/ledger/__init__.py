"""The batch ledger (schema v2): every drain plan, its offset ranges, state, lease and outcome, in SQL.

The public surface for the ledger's callers; its values live in :mod:`kprio_core.model` and are re-exported here
(the pure rules import them from the model, never through this adapter). Submodules: docs/architecture.md.
"""

from kprio_core.ledger.engine import ledger_exists
from kprio_core.ledger.ledger import Ledger
from kprio_core.ledger.meta import Identity
from kprio_core.ledger.schema import SCHEMA_VERSION
from kprio_core.model.records import (Batch, BatchEvent, CommitSample, DrainedSample, DrainSample, Hold, LaunchClaim,
                                      LogEvent, format_batch_id, parse_batch_id)
from kprio_core.model.states import IN_FLIGHT, TRANSITIONS, BatchState

__all__ = [
    "IN_FLIGHT", "SCHEMA_VERSION", "TRANSITIONS", "Batch", "BatchEvent", "BatchState", "CommitSample", "DrainSample",
    "DrainedSample", "Hold", "Identity", "LaunchClaim", "Ledger", "LogEvent", "format_batch_id", "ledger_exists",
    "parse_batch_id",
]
