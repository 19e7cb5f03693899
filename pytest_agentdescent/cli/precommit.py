"""The ``agentdescent-dry-run`` pre-commit hook: a short dry run of the roots a change touches.

pre-commit passes the changed files (at ``pre-push``: the files of the commits
being pushed); only the artifact roots holding one of them are evolved, for one
round on a scratch ledger (``agentdescent run ROOTS --dry-run --rounds 1``), so
a push that changes no agent file costs nothing.  The roots are the hook's
``--root`` arguments, else ``evolve_paths`` of the pytest configuration.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_agentdescent.cli._common import installed_cli
from pytest_agentdescent.cli.inifile import find_inifile

__all__ = ["configured_roots", "main", "touched_roots"]


def configured_roots(cwd: Path) -> list[str]:
    """``evolve_paths`` of the pytest configuration found from ``cwd``, relative to ``cwd``."""
    ini = find_inifile(cwd)
    if ini is None:
        return []
    out: list[str] = []
    for entry in ini.paths("evolve_paths"):
        target = (ini.path.parent / entry).resolve()
        out.append(os.path.relpath(target, cwd.resolve()))
    return out


def touched_roots(roots: Sequence[str], files: Sequence[str], cwd: Path) -> list[str]:
    """The roots (in the order given) that hold at least one of ``files``."""
    base = cwd.resolve()
    changed = [(base / name).resolve() for name in files]
    out: list[str] = []
    for root in roots:
        target = (base / root).resolve()
        if any(path == target or target in path.parents for path in changed):
            out.append(root)
    return out


def _cli() -> list[str]:
    found = installed_cli()
    if found is None:
        return [sys.executable, "-c", "from pytest_agentdescent.cli import main; main()"]
    return [found]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentdescent-dry-run",
        description="Dry-run one round of evolution on the artifact roots the files touch.")
    parser.add_argument("--root", action="append", default=[], metavar="PATH",
                        help="An artifact root (repeatable; default: evolve_paths of the ini).")
    parser.add_argument("--rounds", type=int, default=1, help="Rounds of the dry run (1).")
    parser.add_argument("files", nargs="*", help="Changed files (given by pre-commit).")
    args = parser.parse_args(argv)
    cwd = Path.cwd()
    roots = args.root or configured_roots(cwd)
    if not roots:
        print("agentdescent-dry-run: no artifact roots; give them in .pre-commit-config.yaml "
              "(args: [--root, skills/]) or set evolve_paths in the pytest configuration",
              file=sys.stderr)
        return 1
    touched = touched_roots(roots, args.files, cwd)
    if not touched:
        print("agentdescent-dry-run: no artifact root changed; nothing to evolve",
              file=sys.stderr)
        return 0
    command = [*_cli(), "run", *touched, "--dry-run", "--rounds", str(args.rounds)]
    shown = " ".join(["agentdescent run", *touched, "--dry-run --rounds", str(args.rounds)])
    print(f"agentdescent-dry-run: {shown}", file=sys.stderr, flush=True)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
