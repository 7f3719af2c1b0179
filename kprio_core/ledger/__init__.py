"""The batch ledger (schema v2): every drain plan, its offset ranges, state, lease and outcome, in SQL.

``from kprio_core.ledger import Ledger, Batch, BatchState`` is the public surface for the ledger's callers: the
values it hands out live in the model (:mod:`kprio_core.model.records`, :mod:`kprio_core.model.states`), are
re-exported here, and the pure rules import them from the model, never through this adapter. The submodules:
store (the engine, the clock, one transaction, the ledger's identity), one repository per part over it: batches
(record a plan, read the batches), moves (drained, checked, committed, failed: fenced), attempts (retry, replay,
split, redrain), leases, launches (one driver launches a run key), beliefs (about the log, and its changes), samples
(burst windows, rate samples, record sizes, throughput, the commit samples); and what they share: rows (a batch's
rows), rules (slots, overlap, holds, commit order), commit_samples (writing them), schema (tables), engine (SQLite
BEGIN IMMEDIATE, dialect INSERT), meta (identity, numbering, refusing other schemas), codec (rows <-> values), gate
(the process's open transactions, which a pause point waits out); ledger (the Ledger: the store and its repositories).
"""

from kprio_core.ledger.engine import ledger_exists
from kprio_core.ledger.ledger import Ledger
from kprio_core.ledger.meta import Identity
from kprio_core.ledger.schema import SCHEMA_VERSION
from kprio_core.ledger.store import utc_now
from kprio_core.model.records import (
    Batch,
    BatchEvent,
    CommitSample,
    DrainedSample,
    DrainSample,
    Hold,
    LaunchClaim,
    LogEvent,
    format_batch_id,
    parse_batch_id,
)
from kprio_core.model.states import IN_FLIGHT, TRANSITIONS, BatchState

__all__ = [
    "IN_FLIGHT",
    "SCHEMA_VERSION",
    "TRANSITIONS",
    "Batch",
    "BatchEvent",
    "BatchState",
    "CommitSample",
    "DrainSample",
    "DrainedSample",
    "Hold",
    "Identity",
    "LaunchClaim",
    "Ledger",
    "LogEvent",
    "format_batch_id",
    "ledger_exists",
    "parse_batch_id",
    "utc_now",
]
