"""The ``agentdescent`` command line: one click group, one module per command.

``run`` wraps ``pytest --evolve``; ``check`` (the pre-commit hook) and
``review`` (the pull-request status check) read what a run would evolve
through :mod:`pytest_agentdescent.probe`; ``pr``, ``report`` and ``init`` publish,
show and set up.  Every command writes data to stdout and logs to stderr, and
exits 0 when all is well, 1 when it found a problem, 2 on a usage error (click's).
``run`` is the exception: it exits with pytest's own code (4 for a usage error).
"""

from __future__ import annotations

import click

from pytest_agentdescent import __version__
from pytest_agentdescent.cli.check import check
from pytest_agentdescent.cli.init import init
from pytest_agentdescent.cli.pr import pr
from pytest_agentdescent.cli.report import report
from pytest_agentdescent.cli.review import review
from pytest_agentdescent.cli.run import run

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentdescent")
def main() -> None:
    """Evolve agent skill folders, prompts and AGENTS.md against your pytest suite."""


main.add_command(run)
main.add_command(check)
main.add_command(review)

main.add_command(pr)
main.add_command(report)
main.add_command(init)
