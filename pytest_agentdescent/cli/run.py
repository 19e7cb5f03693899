"""``agentdescent run``: ``pytest --evolve`` with the common knobs as options.

The evolution is the plugin's; this command only builds the pytest command
line and runs it as a child of the same interpreter, so conftest hooks, ini
keys, plugins and pytest's exit codes behave exactly as they do for
``python -m pytest --evolve``.  Two things it adds: a run without artifact
paths (none given, no ``evolve_paths`` in the ini) is a usage error instead of
a plain test run, and ``-n 0`` comes before the user's pytest arguments where
pytest-xdist is installed, so an ``-n`` in ``addopts`` does not refuse the run.
With ``--json`` pytest's output goes to stderr and stdout carries one JSON object,
so a script gets the exit code and this run's report without parsing the terminal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from agentdescent_core.sandbox.spec import BACKEND_NAMES
from pytest_agentdescent.cli._common import PytestArgsCommand, pytest_args
from pytest_agentdescent.cli.project import repo_root, state_dir, state_dir_argument
from pytest_agentdescent.probe import PLUGIN, REQUIRE_ENV

__all__ = ["build_command", "run"]


def build_command(
    paths: Sequence[str],
    *,
    rounds: int | None = None,
    workers: int | None = None,
    repeats: int | None = None,
    model: str | None = None,
    sandbox: str | None = None,
    dry_run: bool = False,
    pr: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``python -m pytest --evolve ...`` argv that ``run`` executes."""
    import importlib.util

    argv = [sys.executable, "-m", "pytest", "-p", PLUGIN]
    if importlib.util.find_spec("xdist") is not None:
        argv += ["-n", "0"]
    for path in paths:
        argv += ["--evolve", path]
    valued = (("--evolve-rounds", rounds), ("--evolve-workers", workers),
              ("--evolve-repeats", repeats), ("--evolve-model", model),
              ("--evolve-sandbox", sandbox))
    for option, value in valued:
        if value is not None:
            argv += [option, str(value)]
    if dry_run:
        argv.append("--evolve-dry-run")
    if pr:
        argv.append("--evolve-pr")
    return [*argv, *extra]


@click.command(cls=PytestArgsCommand)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--rounds", type=click.IntRange(min=0), help="Rounds of evolution (--evolve-rounds).")
@click.option("--workers", type=click.IntRange(min=1),
              help="Proposals per round (--evolve-workers).")
@click.option("--repeats", type=click.IntRange(min=1),
              help="Pair budget of the acceptance test, 3 x N pairs per task (--evolve-repeats).")
@click.option("--model", metavar="PROVIDER:MODEL",
              help="anthropic:MODEL or openai:MODEL (--evolve-model).")
@click.option("--sandbox", type=click.Choice(BACKEND_NAMES),
              help="Where candidates' tests run (--evolve-sandbox).")
@click.option("--dry-run", is_flag=True,
              help="Evolve on a scratch ledger; no ref changes (--evolve-dry-run).")
@click.option("--pr", is_flag=True, help="Open or update the pull request (--evolve-pr).")
@click.option("--json", "as_json", is_flag=True,
              help="pytest's output to stderr; on stdout one JSON object: the exit code, the "
                   "report's path and this run's report.json (null when it wrote none).")
def run(paths: tuple[str, ...], rounds: int | None, workers: int | None, repeats: int | None,
        model: str | None, sandbox: str | None, dry_run: bool, pr: bool, as_json: bool) -> None:
    """Evolve PATHS (default: the ini's evolve_paths) with `pytest --evolve`.

    Arguments after `--` go to pytest as they are, e.g.
    `agentdescent run skills/ --rounds 5 -- -k support --evolve-seed 3`.
    Exits with pytest's code: 0 the run completed, 1 it ended on an error,
    4 a usage error.
    """
    argv = build_command(paths, rounds=rounds, workers=workers, repeats=repeats, model=model,
                         sandbox=sandbox, dry_run=dry_run, pr=pr, extra=pytest_args())
    env = dict(os.environ)
    env[REQUIRE_ENV] = "1"
    shown = ["python", *argv[1:]]
    click.echo(f"agentdescent run: {shlex.join(shown)}", err=True)
    report = _report_path(pytest_args())
    before = _identity(report)
    # File descriptor 2, not sys.stderr: the child writes to the real stream.
    child = subprocess.Popen(argv, env=env, stdout=2 if as_json else None)
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            # Ctrl-C reached pytest too (same process group): let it write its report and stop.
            continue
    if as_json:
        click.echo(json.dumps(run_summary(code, report, before), indent=2))
    raise SystemExit(code)


def run_summary(code: int, report: Path | None,
                before: tuple[int, int, int] | None) -> dict[str, Any]:
    """What ``--json`` prints: the exit code and the report this run wrote, if it wrote one.

    ``report`` is where the run writes report.json (None outside a repository) and
    ``before`` its :func:`_identity` as the run started.  A report.json that is still
    that file is an earlier run's, so it is never shown as this one's: a run that
    stopped before writing its report says ``"report": null``.  (Identity, not age:
    a run that stops at once can end in the second the last one wrote.)
    """
    summary: dict[str, Any] = {"exit_code": code, "report_path": None, "report": None}
    now = _identity(report)
    if report is not None and now is not None and now != before:
        summary["report_path"] = str(Path(os.path.relpath(report)))
        summary["report"] = json.loads(report.read_text(encoding="utf-8"))
    return summary


def _report_path(extra: Sequence[str]) -> Path | None:
    try:
        return state_dir(repo_root(), state_dir_argument(extra)) / "report.json"
    except click.ClickException:
        return None


def _identity(path: Path | None) -> tuple[int, int, int] | None:
    """(inode, mtime in ns, size) of ``path``, None when there is no such file: any
    write of the file since changes it."""
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        return None
    return None if stat is None else (stat.st_ino, stat.st_mtime_ns, stat.st_size)
