"""The ``agentdescent`` command line.

Only ``--version`` and ``--help`` exist yet; the subcommands (``run``, ``check``,
``review``, ``pr``, ``report``, ``init``) arrive with their issues.
"""

from __future__ import annotations

import click

from pytest_agentdescent import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentdescent")
def main() -> None:
    """Evolve agent skill folders, prompts and AGENTS.md against your pytest suite."""
