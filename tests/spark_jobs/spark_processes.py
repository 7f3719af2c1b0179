"""Spark processes the slow tests start from pyspark's own scripts (standalone master/worker, Connect server)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Run ``args`` (a script of SPARK_HOME/bin) in its own session, output to ``log``."""
    with log.open("wb") as out:
        # Its own session: stopping it stops exactly what it started (spark-class execs java).
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env={**env, "SPARK_HOME": str(SPARK_HOME)},
                                start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL it when it does not end in time."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
