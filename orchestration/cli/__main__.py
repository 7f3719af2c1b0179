"""``python -m orchestration.cli``: the ``kprio`` command without its console script."""

from orchestration.cli.main import app

app(prog_name="kprio")
