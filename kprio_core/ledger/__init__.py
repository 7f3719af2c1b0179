"""The batch ledger: every drain plan, its reserved offset ranges and its state, in SQL.

``from kprio_core.ledger import Ledger, Batch, BatchState`` is the public surface; the
submodules are schema (tables), engine (SQLite BEGIN IMMEDIATE), states (transitions),
records (Batch, ids), stats (drain stats) and ledger (the Ledger itself).
"""

from kprio_core.ledger.ledger import HISTORY_STATE, Ledger
from kprio_core.ledger.records import Batch, BatchEvent, format_batch_id, parse_batch_id
from kprio_core.ledger.states import IN_FLIGHT, TRANSITIONS, BatchState

__all__ = [
    "HISTORY_STATE",
    "IN_FLIGHT",
    "TRANSITIONS",
    "Batch",
    "BatchEvent",
    "BatchState",
    "Ledger",
    "format_batch_id",
    "parse_batch_id",
]
