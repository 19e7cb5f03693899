"""Where the commands of the CLI find the project: its git root and its state directory.

``pr``, ``report`` and ``init`` run from anywhere inside a checkout; like
``pytest --evolve`` they resolve the state directory (``evolve_state_dir``,
default ``.agentdescent``) against the repository root.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
import git

from pytest_agentdescent.cli.inifile import find_inifile

__all__ = ["DEFAULT_STATE_DIR", "repo_root", "state_dir", "state_dir_argument"]

DEFAULT_STATE_DIR = ".agentdescent"


def repo_root(start: Path | None = None) -> Path:
    """The working-tree root of the git repository holding ``start`` (default: the cwd)."""
    here = (start or Path.cwd()).resolve()
    try:
        with git.Repo(here, search_parent_directories=True) as repo:
            if repo.working_tree_dir is None:
                raise click.ClickException(f"{here} is inside a bare git repository; run this "
                                           "in a checkout of your project")
            return Path(repo.working_tree_dir).resolve()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise click.ClickException(
            f"{here} is not inside a git repository; run this in your project's checkout"
        ) from None


def state_dir(root: Path, given: str | None = None, start: Path | None = None) -> Path:
    """The state directory: ``given``, else the ini's ``evolve_state_dir``, else the default."""
    if given is None:
        ini = find_inifile(start or Path.cwd(), root)
        raw = ini.read().get("evolve_state_dir") if ini is not None else None
        given = str(raw).strip() if raw else DEFAULT_STATE_DIR
    path = Path(given).expanduser()
    return path if path.is_absolute() else root / path


def state_dir_argument(pytest_args: Sequence[str]) -> str | None:
    """The ``--evolve-state-dir`` among pytest arguments (the last one wins, as in pytest).

    For commands that pass arguments through to pytest and then read what the run wrote.
    """
    given = None
    for index, word in enumerate(pytest_args):
        if word == "--evolve-state-dir" and index + 1 < len(pytest_args):
            given = pytest_args[index + 1]
        elif word.startswith("--evolve-state-dir="):
            given = word.split("=", 1)[1]
    return given
