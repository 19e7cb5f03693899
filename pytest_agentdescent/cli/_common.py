"""Pieces the commands of the CLI share: arguments after ``--`` that belong to pytest,
and where the ``agentdescent`` script is for a process that starts it again."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

__all__ = ["PytestArgsCommand", "installed_cli", "pytest_args"]

_KEY = "agentdescent.pytest_args"


class PytestArgsCommand(click.Command):
    """A command whose arguments after the first ``--`` go to pytest untouched.

    click would otherwise take ``-- -k slow`` as two more positional
    arguments, losing the line between our paths and pytest's options; here
    everything after the separator is kept apart in ``ctx.meta`` and read with
    :func:`pytest_args`.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[_KEY] = tuple(args[cut + 1:])
            args = args[:cut]
        else:
            ctx.meta[_KEY] = ()
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: Any) -> None:
        pieces = [*self.collect_usage_pieces(ctx), "[-- PYTEST_ARGS...]"]
        formatter.write_usage(ctx.command_path, " ".join(pieces))


def pytest_args(ctx: click.Context | None = None) -> tuple[str, ...]:
    """The arguments given after ``--`` to the running command."""
    context = ctx if ctx is not None else click.get_current_context()
    found: Sequence[str] = context.meta.get(_KEY, ())
    return tuple(found)


def installed_cli() -> str | None:
    """The ``agentdescent`` script next to this interpreter (its virtualenv), else on PATH."""
    name = "agentdescent.exe" if os.name == "nt" else "agentdescent"
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which("agentdescent")
