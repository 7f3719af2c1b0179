"""The runtime that carries a batch's lifecycle out, free of any orchestrator's rules.

Its modules (the tick and its one applier every driver uses, one run of one batch, the ports they work
through, ...): docs/architecture.md, "orchestration: the runtime, the adapters and the drivers".
"""
