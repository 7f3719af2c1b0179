"""Which Java kprio's JVMs run (the embedded broker's nodes, a local Spark session's driver), found one way; a
class-data archive fits only the Java build that wrote it: :func:`java_build` names it for an archive's key.

>>> find_java({"JAVA_HOME": "/nowhere", "PATH": ""}) is None
True
>>> java_build("/nowhere/bin/java") is None
True
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path


def find_java(environ: Mapping[str, str] | None = None) -> str | None:
    """The java to run, as Spark's and Kafka's launchers pick it: ``$JAVA_HOME/bin/java``, else ``PATH``'s; or None."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH"))


def java_build(java: str | os.PathLike) -> str | None:
    """``<resolved path>|<modification time in ns>`` of the binary ``java``: one build of Java (None: it is gone)."""
    real = Path(java).resolve()
    try:
        return f"{real}|{real.stat().st_mtime_ns}"
    except OSError:
        return None
