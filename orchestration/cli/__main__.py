"""``python -m orchestration.cli``: the ``kprio`` command without its console script."""

from orchestration.cli import run

run()
