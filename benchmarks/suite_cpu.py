"""Benchmark: where a command's CPU goes, by kind of process (the test suite's, to bring it under 25 minutes).

One command, from a fresh clone after ``bash scripts/setup.sh``: ``python benchmarks/suite_cpu.py -- python3 -m
pytest`` (any command after ``--``). Not a test: it runs the command, samples every process of the machine every
``--every`` seconds (0.3) and prints, when the command ends, its wall time, how busy the machine's cores were, and
the CPU seconds each kind of process used and how many of them started (:func:`kind`: kprio's warm run workers,
child ``kprio`` commands, the pytest process, Spark's JVM and Python workers, the Kafka broker, the schema registry,
Dagster's and Airflow's processes), then the processes that used the most. ``--json``: one JSON document instead.

A process that starts and ends between two samples is not seen (its CPU is missed, not misplaced); one seen is
counted up to its last sample. The machine's other processes count too: run it on a quiet machine.

Figures and what they say: docs/benchmarks.md, "Where the test suite's CPU goes".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter

import psutil

KINDS = (
    ("kprio worker", ("multiprocessing.forkserver",)),  # a pool's fork server, and the workers it forked
    ("kprio command", ("orchestration.cli", "/bin/kprio ")),
    ("Spark Python worker", ("pyspark.daemon", "pyspark.worker")),
    ("Dagster", ("dagster",)),
    ("Airflow", ("airflow",)),
    ("pytest", ("pytest",)),
)
"""Kinds of Python processes by a word of their command line, first match wins (a child ``kprio drain`` run by a
test names the test's directory, under ``pytest-of-...``: it is a kprio command). The JVMs are told apart in
:func:`kind`."""


def kind(cmdline: list[str]) -> str:
    """The kind of a process by its command line.

    >>> kind(["/usr/bin/python3", "-B", "-c", "from multiprocessing.forkserver import main; main(3, 5, [])"])
    'kprio worker'
    >>> kind(["/usr/bin/java", "-cp", "/x/pyspark/jars/*", "org.apache.spark.deploy.SparkSubmit"])
    'Spark JVM'
    >>> kind(["/usr/bin/java", "-cp", "/root/.cache/kprio/kafka/libs/*", "kafka.Kafka", "server.properties"])
    'Kafka broker'
    >>> kind(["python3", "-m", "orchestration.cli", "drain", "--config", "/tmp/pytest-of-root/k.yaml"])
    'kprio command'
    """
    line = " ".join(cmdline)
    program = cmdline[0] if cmdline else ""
    if program.endswith("java") or "spark-class" in line:
        if "spark" in line.lower():
            return "Spark JVM"
        if "kafka.Kafka" in line or ("kafka" in line.lower() and "registry" not in line.lower()):
            return "Kafka broker"
        return "schema registry" if "registry" in line.lower() or "apicurio" in line.lower() else "other JVM"
    found = next((name for name, words in KINDS if any(word in line for word in words)), None)
    return found or ("other Python" if "python" in program else "other")


def sample(cpu: dict[int, float], kinds: dict[int, str], names: dict[int, str]) -> None:
    """Each live process's CPU seconds so far (user + system, not its children's) into ``cpu``."""
    for proc in psutil.process_iter():
        try:
            times = proc.cpu_times()
            if proc.pid not in kinds:
                cmdline = proc.cmdline()
                kinds[proc.pid], names[proc.pid] = kind(cmdline), " ".join(cmdline)[:140]
            cpu[proc.pid] = times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def measure(command: list[str], every_s: float) -> dict:
    """Run ``command`` and return its figures (see the module docstring)."""
    before: dict[int, float] = {}
    kinds: dict[int, str] = {}
    names: dict[int, str] = {}
    sample(before, kinds, names)
    start, cpu = dict(before), dict(before)
    machine = _busy(psutil.cpu_times())
    began = time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(cpu, kinds, names)
        time.sleep(every_s)
    wall = time.monotonic() - began
    busy = _busy(psutil.cpu_times()) - machine
    used = {pid: seconds - start.get(pid, 0.0) for pid, seconds in cpu.items()}
    by_kind: Counter = Counter()
    seen: Counter = Counter()
    for pid, seconds in used.items():
        by_kind[kinds.get(pid, "other")] += seconds
        seen[kinds.get(pid, "other")] += pid not in start
    top = sorted(((pid, s) for pid, s in used.items() if s >= 0.1), key=lambda item: -item[1])[:12]
    return {"command": command, "exit": proc.returncode, "wall_s": round(wall, 1), "cores": psutil.cpu_count(),
            "busy_s": round(busy, 1), "by_kind": {k: round(v, 1) for k, v in by_kind.most_common()},
            "started": dict(seen),
            "top": [{"pid": pid, "cpu_s": round(seconds, 1), "kind": kinds.get(pid), "command": names.get(pid)}
                    for pid, seconds in top]}


def _busy(times) -> float:
    """The machine's CPU seconds not idle (guest time is counted in user time already)."""
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def show(figures: dict) -> None:
    wall, cores, busy = figures["wall_s"], figures["cores"], figures["busy_s"]
    print(f"{' '.join(figures['command'])}: exit {figures['exit']} after {wall:,.1f} s; the machine's {cores} cores "
          f"were busy {busy:,.0f} CPU s ({100 * busy / (max(wall, 0.1) * cores):.0f}%)")
    total = sum(figures["by_kind"].values()) or 1.0
    print(f"\n{'CPU s':>9}  {'share':>5}  {'started':>7}  kind of process")
    for name, seconds in figures["by_kind"].items():
        print(f"{seconds:9,.1f}  {100 * seconds / total:4.0f}%  {figures['started'].get(name, 0):7d}  {name}")
    print(f"\n{'CPU s':>9}  {'pid':>7}  process")
    for row in figures["top"]:
        print(f"{row['cpu_s']:9,.1f}  {row['pid']:7d}  {row['command']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=0.3, help="seconds between two samples (0.3)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --, e.g. -- python3 -m pytest")
    figures = measure(command, args.every)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        show(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
