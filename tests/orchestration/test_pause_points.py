"""A pause point stops its process between ledger transactions, whichever thread runs them.

The paused tests (recovery, healing, stale writers) open the ledger while a drain process is
stopped at a named point; a stop that landed inside a transaction of another thread of that
process (the drain loop's tick, another batch's run) would hold SQLite's write lock for the whole
pause, and the test's ledger would give up "database is locked" (seen once in CI). Here a child
process hammers its ledger from a second thread while its main thread passes a pause point
again and again; each time it is stopped, this process must get the write lock at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from kprio_core.ledger import Ledger
from orchestration.services.process import wait_for

PAUSES = 10

CHILD = textwrap.dedent("""
    import sys, threading
    from kprio_core.ledger import Ledger
    from orchestration.runtime.faults import crash_point

    url, pauses = sys.argv[1], int(sys.argv[2])
    Ledger(url).close()
    print("ready", flush=True)

    def hammer():
        with Ledger(url) as ledger:
            while True:
                ledger.identity()  # a transaction (BEGIN IMMEDIATE on SQLite: the write lock)

    threading.Thread(target=hammer, daemon=True).start()
    for _ in range(pauses):
        crash_point("before-publish", "orders")
    print("done", flush=True)
""")


def test_a_paused_process_holds_no_ledger_transaction_of_any_thread(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = {**os.environ, "KPRIO_PAUSE_AT": "before-publish:orders"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, url, str(PAUSES)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for pause in range(PAUSES):
            assert wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, 30,
                            interval_s=0.01), f"pause {pause}: the child never stopped"
            with Ledger(url, busy_timeout_s=2) as ledger:  # raises LedgerUnavailable ("locked") if held
                ledger.identity()
            time.sleep(0.3)  # the child tells a stop that came and went by one long sleep (faults.py), not a race
            os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read().strip() == "done"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
