"""The machinery of the table of bad inputs (test_cli_errors.py, test_cli_errors_arguments.py): a case, the
configuration and environment it runs in, running it as a real ``kprio`` process, and what every case asserts.

``SECRETS`` are in every case's environment and ``URL_SECRET`` is written where a case puts a password by mistake:
neither may come out. Each test module runs its own cases once, in a module-scoped fixture (:func:`run_all`): the
cases that fail on the configuration's load in one ``kprio`` process (the interpreter's start was most of each case's
time: the values table took 128 s, 41 s so), the others each in its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.fixtures.small_disks import read_only_dir

SECRETS = {
    "KPRIO_KAFKA_SASL_PASSWORD": "sasl-SECRET-4711",
    "KPRIO_LEDGER_PASSWORD": "ledger-SECRET-4712",
    "KPRIO_DAGSTER_PG_PASSWORD": "dagster-SECRET-4713",
}
URL_SECRET = "url-SECRET-4714"
"""A password written into a URL on the command line or in a file: it must not come out either."""
ALL_SECRETS = [*SECRETS.values(), URL_SECRET]

LINE = re.compile(r"^kprio: error: (?P<what>.+) \((?P<where>.+)\) \[(?P<code>[a-z_]+)\]$")


def base_config() -> dict:
    """A whole configuration that loads, every path under the case's directory, nothing that answers."""
    return {
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "timeout_s": 1},
        "topics": [{"name": "orders", "priorities": 3, "partitions": 2}],
        "ledger": {"url": "sqlite:///{tmp}/data/ledger.db"},
        "drain": {"output_path": "{tmp}/data/output", "dead_letter_path": "{tmp}/data/dead",
                  "replay_path": "{tmp}/data/replay"},
        "spark": {"connect_dir": "{tmp}/data/connect"},
    }


def merged(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass(frozen=True)
class Case:
    """One bad input: the command line, what is set up, and what must come out."""

    id: str
    argv: tuple[str, ...]
    names: str
    """What the error line must name (a setting, option, file, path or variable)."""
    code: str | None
    """The error's code; None for a case that must succeed (it checks secrets and writes only)."""
    why: str
    exit: int = 1
    config: dict | None = None
    """Changes to the base configuration (written to {tmp}/kprio.yaml and passed as --config)."""
    config_text: str | bytes | None = None
    """The whole configuration file instead (raw: bad YAML, bytes that are not UTF-8)."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files to make first, relative to the case's directory."""
    env: dict[str, str] = field(default_factory=dict)
    read_only: bool = False
    """The command only reads: the file system must be unchanged."""
    with_config: bool = True
    """Pass --config {tmp}/kprio.yaml (commands without --config say False)."""
    needs: str | None = None
    """'ro': the case uses the read-only file system; 'ledger': a ledger is made first."""


def C(id: str, argv: str | tuple[str, ...], names: str, code: str | None, why: str, **kw) -> Case:  # noqa: N802
    return Case(id, tuple(argv.split()) if isinstance(argv, str) else argv, names, code, why, **kw)


@dataclass
class Ran:
    case: Case
    tmp: Path
    ro: Path | None
    returncode: int
    stdout: str
    stderr: str
    before: dict[str, tuple]
    after: dict[str, tuple]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root``: its kind, size and modification time."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (path.is_dir(), st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


def fill(text: str, tmp: Path, ro: Path | None) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{ro}", str(ro))


def prepare(case: Case, tmp: Path, ro: Path | None) -> tuple[list[str], dict[str, str]]:
    tmp.mkdir(parents=True)
    (tmp / "cwd").mkdir()
    for name, content in case.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)  # type: ignore[operator]
    config = tmp / "kprio.yaml"
    if case.config_text is not None:
        content = case.config_text
        (config.write_bytes if isinstance(content, bytes) else config.write_text)(content)  # type: ignore[operator]
    else:
        text = yaml.safe_dump(merged(base_config(), case.config or {}), sort_keys=False)
        config.write_text(fill(text, tmp, ro))
    if case.needs == "ledger":
        from kprio_core.ledger import Ledger

        Ledger(f"sqlite:///{tmp}/data/ledger.db").close()
    argv = [fill(a, tmp, ro) for a in case.argv]
    if case.with_config:
        argv += ["--config", str(config)]
    elif case.id.startswith("config "):  # a case whose --config is the bad path itself
        argv += ["--config", fill(case.names, tmp, ro)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPRIO_", "DAGSTER_"))}
    env.update(SECRETS, DAGSTER_HOME=str(tmp / "dagster_home"), COLUMNS="200")
    env.update({k: fill(v, tmp, ro) for k, v in case.env.items()})
    return argv, env


def run_case(case: Case, tmp: Path, ro: Path | None, timeout: float = 120) -> Ran:
    argv, env = prepare(case, tmp, ro)
    before = snapshot(tmp)
    done = subprocess.run([sys.executable, "-m", "orchestration.cli", *argv], cwd=tmp / "cwd", env=env,
                          capture_output=True, text=True, timeout=timeout)
    return Ran(case, tmp, ro, done.returncode, done.stdout, done.stderr, before, snapshot(tmp))


IN_ONE_PROCESS = """
import json, os, sys
from orchestration.cli.main import app
done = []
for case in json.load(open(sys.argv[1])):
    os.environ.clear()
    os.environ.update(case["env"])
    os.chdir(case["cwd"])
    with open(case["out"], "w+b") as out, open(case["err"], "w+b") as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = app(case["argv"], prog_name="kprio", standalone_mode=False)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    done.append(code)
json.dump(done, open(sys.argv[2], "w"))
"""
"""Cases run one after the other in one ``kprio`` process: each with its environment, working directory and command
line, and its own stdout and stderr (file descriptors 1 and 2, so what a library writes there is the case's too)."""


def loads_only(case: Case) -> bool:
    """Whether ``case`` fails on the configuration's load, before any service, file or process of the command: one
    process runs all such cases of a table (:func:`run_in_one_process`); the process boundary adds nothing there."""
    return case.code == "config_invalid" and case.needs is None


def run_in_one_process(cases: list[tuple[Case, Path]], ro: Path | None, timeout: float = 600) -> list[Ran]:
    """``cases`` (each with its directory) run by one ``kprio`` process (:data:`IN_ONE_PROCESS`), as :func:`run_case`
    runs one: the interpreter starts once for all of them (most of a case's time)."""
    if not cases:
        return []
    prepared = []
    for case, tmp in cases:
        argv, env = prepare(case, tmp, ro)
        prepared.append({"argv": argv, "env": env, "cwd": str(tmp / "cwd"), "out": str(tmp.parent / f"{tmp.name}.out"),
                         "err": str(tmp.parent / f"{tmp.name}.err")})
    before = [snapshot(tmp) for _, tmp in cases]
    batch, codes = cases[0][1].parent / "one-process.json", cases[0][1].parent / "one-process-codes.json"
    batch.write_text(json.dumps(prepared))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPRIO_", "DAGSTER_"))}
    done = subprocess.run([sys.executable, "-c", IN_ONE_PROCESS, str(batch), str(codes)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr
    return [Ran(case, tmp, ro, code, Path(p["out"]).read_text(), Path(p["err"]).read_text(), was, snapshot(tmp))
            for (case, tmp), p, was, code in zip(cases, prepared, before, json.loads(codes.read_text()), strict=True)]


def run_all(cases: list[Case], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case of ``cases`` run once: those that fail on the configuration's load all in one process
    (:func:`loads_only`), the others each in its own, three at a time (most of a run is the interpreter starting);
    the cases on a read-only file system only where one can be mounted (else a start there would really start a
    broker)."""
    root = tmp_path_factory.mktemp("bad-inputs")
    with contextlib.ExitStack() as stack:
        try:
            ro: Path | None = stack.enter_context(read_only_dir(root / "read-only"))
        except pytest.skip.Exception:
            ro = None
        chosen = [(c, root / f"case-{i:03d}") for i, c in enumerate(cases) if c.needs != "ro" or ro is not None]
        with ThreadPoolExecutor(max_workers=3) as pool:
            one = pool.submit(run_in_one_process, [(c, tmp) for c, tmp in chosen if loads_only(c)], ro)
            runs = list(pool.map(lambda ct: run_case(ct[0], ct[1], ro), [ct for ct in chosen if not loads_only(ct[0])]))
            runs += one.result()
    return {r.case.id: r for r in runs}


LONGEST_LINE = 600
"""The longest error line a person is shown: a value pasted by mistake is quoted cut, not whole."""


def assert_one_line(case: Case, ran: dict[str, Ran]) -> None:
    """What every case asserts (the module docstring of test_cli_errors.py), on its run in ``ran``."""
    if case.id not in ran:
        pytest.skip("no read-only file system can be mounted here (it needs root with permission to mount)")
    r = ran[case.id]
    shown = f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    if case.code is None:
        assert r.returncode == 0 and not lines, shown
    else:
        assert r.returncode == case.exit, shown
        assert len(lines) == 1, shown
        assert len(lines[0]) <= LONGEST_LINE, f"a line of {len(lines[0]):,} characters: {lines[0][:300]}"
        found = LINE.match(lines[0])
        assert found, f"not 'kprio: error: <what> (<where>) [<code>]': {lines[0]}"
        assert found["code"] == case.code, shown
        assert fill(case.names, r.tmp, r.ro) in lines[0], f"the line does not name {case.names!r}: {lines[0]}"
        assert r.stdout == "", shown
    for secret in ALL_SECRETS:
        assert secret not in r.stdout + r.stderr, f"the output shows a secret:\n{shown}"
    for path in r.tmp.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            # The case's own kprio.yaml may hold the URL's secret: the case wrote it there, as the mistake.
            secrets = SECRETS.values() if path == r.tmp / "kprio.yaml" else ALL_SECRETS
            assert not any(s.encode() in content for s in secrets), f"{path} holds a secret"
    if case.read_only:
        changed = {k for k in r.before.keys() | r.after.keys() if r.before.get(k) != r.after.get(k)}
        assert not changed, f"a command that only reads (or failed before writing) changed {sorted(changed)}"
