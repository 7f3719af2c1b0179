"""Deferrable lag sensing: a trigger on Airflow's triggerer asks the core lifecycle whether a tick has work.

:class:`Backlog` runs the tick's read-only half (:func:`orchestration.runtime.tick.decide_all`; nothing recorded
or launched) over every logical topic: there is work when some decision
:attr:`~kprio_core.lifecycle.decision.Decision.acts`; otherwise its summary is the skip reason, logged when it
changes. :class:`KprioLagTrigger` polls it on the triggerer's event loop (blocking calls in a thread, no worker
slot held); :class:`WaitForBatches` asks once itself before deferring. The plan task that follows decides again
(a decision that passed in between launches nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent


@dataclass(frozen=True)
class Found:
    """Whether a tick has work now, and what each topic's decision says."""

    work: bool
    lines: tuple[str, ...]

    @property
    def summary(self) -> str:
        return "; ".join(self.lines) or "no logical topic configured"

    def as_event(self) -> dict[str, Any]:
        return {"work": self.work, "decisions": list(self.lines)}


class Backlog:
    """The read-only tick over every topic of ``config_path``; opens its ledger and broker client once."""

    def __init__(self, config_path: str | None) -> None:
        self.config_path = config_path
        self._open: tuple[Any, Any, Any] | None = None

    def check(self) -> Found:
        from orchestration.runtime.runs import NoRuns
        from orchestration.runtime.tick import decide_all

        config, ledger, edge = self._resources()
        with edge.one_view():
            decisions = decide_all(NoRuns(), edge, ledger, config, config.topics)
        return Found(any(d.acts for d in decisions), tuple(d.describe() for d in decisions))

    def close(self) -> None:
        if self._open is not None:
            _, ledger, edge = self._open
            self._open = None
            with contextlib.suppress(Exception):
                edge.close()
            ledger.close()

    def _resources(self) -> tuple[Any, Any, Any]:
        if self._open is None:
            from kprio_core.kafka import KafkaEdge
            from kprio_core.ledger import Ledger
            from orchestration.airflow.tasks import task_config

            config = task_config(self.config_path)
            self._open = (config, Ledger.from_settings(config.ledger), KafkaEdge(config.kafka))
        return self._open


class KprioLagTrigger(BaseTrigger):
    """Fires (one event) when a tick over the configured priority topics has work; polls every ``poll_s`` s."""

    def __init__(self, config_path: str | None, poll_s: float = 1.0) -> None:
        super().__init__()
        self.config_path, self.poll_s = config_path, float(poll_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {"config_path": self.config_path,
                                                                       "poll_s": self.poll_s}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        backlog, said = Backlog(self.config_path), None
        try:
            while True:
                found = await asyncio.to_thread(backlog.check)
                if found.work:
                    self.log.info(f"work for a tick: {found.summary}")
                    yield TriggerEvent(found.as_event())
                    return
                if found.summary != said:
                    self.log.info(f"waiting: {found.summary}")
                    said = found.summary
                await asyncio.sleep(self.poll_s)
        finally:
            await asyncio.to_thread(backlog.close)


class WaitForBatches(BaseOperator):
    """Wait, deferred to :class:`KprioLagTrigger` (no worker slot held), until a tick has work; its decisions."""

    ui_color = "#e8f4fd"

    def __init__(self, *, config_path: str | None, poll_s: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path, self.poll_s = config_path, poll_s

    def execute(self, context: Any) -> Sequence[str]:
        backlog = Backlog(self.config_path)
        try:
            found = backlog.check()
        finally:
            backlog.close()
        if found.work:
            self.log.info(f"work for a tick: {found.summary}")
            return found.lines
        self.log.info(f"waiting, deferred to the triggerer: {found.summary}")
        self.defer(trigger=KprioLagTrigger(self.config_path, self.poll_s), method_name="resume")

    def resume(self, context: Any, event: dict[str, Any] | None = None) -> Sequence[str]:
        lines = list((event or {}).get("decisions", ()))
        self.log.info(f"work for a tick: {'; '.join(lines)}")
        return lines
