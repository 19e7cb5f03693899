"""``agentdescent report``: what the last evolution did, and with ``--history`` every run.

The last run's evidence is the ``report.md`` / ``report.json`` pair that
``pytest --evolve`` leaves in the state directory; the history is the durable
run store (``runs.sqlite3`` there), one LoopKernel run per ``pytest --evolve``
with a generation per round.  Both are read-only here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from pytest_agentdescent.cli.project import repo_root, state_dir
from pytest_agentdescent.runstate import RUN_STORE

__all__ = ["report", "run_history"]

_NOTHING_YET = "run `pytest --evolve PATH` (or `agentdescent run PATH`) first"


def _fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))


def run_history(store_path: Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Every run in the store (newest first) with its replayed report, as JSON-ready dicts."""
    from agentdescent_core.loop.durable import SqliteRunStore
    from agentdescent_core.loop.kernel import load_report

    store = SqliteRunStore(store_path)
    try:
        out: list[dict[str, Any]] = []
        for record in store.runs(limit=limit):
            out.append({**record.to_dict(),
                        "report": load_report(store, record.run_id).to_dict()})
        return out
    finally:
        store.close()


def _history_table(runs: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for run in runs:
        rep = run["report"]
        generations = rep.get("generations") or []
        lines.append(
            f"run {run['run_id']}  {run['status']}  started {_when(run['created_at'])} UTC  "
            f"best {_fmt(rep.get('best_reward'))}  stopped {rep.get('stopped_reason') or '-'}  "
            f"generations {len(generations)}  cost {_fmt(rep.get('total_cost'), 4)}")
        if generations:
            lines.append(f"  {'gen':>4}  {'action':<8}  {'reward':>7}  {'gain':>7}  "
                         f"{'cost':>8}  reason")
        for gen in generations:
            lines.append(
                f"  {gen.get('generation'):>4}  {gen.get('action', '-'):<8}  "
                f"{_fmt(gen.get('reward')):>7}  {_fmt(gen.get('gain')):>7}  "
                f"{_fmt(gen.get('cost'), 4):>8}  {gen.get('reason') or ''}")
        for failure in rep.get("failures") or []:
            lines.append(f"  failure: {json.dumps(failure, sort_keys=True)}")
    return lines


@click.command("report")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of Markdown / a table.")
@click.option("--history", is_flag=True,
              help="Every run in the run store (runs.sqlite3) and its generations.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="With --history: only the newest N runs.")
@click.option("--state-dir", "state", default=None, metavar="DIR",
              help="The state directory (default: evolve_state_dir of the pytest "
                   "configuration, else .agentdescent), relative to the repository root.")
def report(as_json: bool, history: bool, limit: int | None, state: str | None) -> None:
    """Show the last run's report, or with --history the runs recorded in the run store.

    Exit codes: 0 shown, 1 nothing recorded yet (or the file is unreadable), 2 usage.
    """
    root = repo_root()
    directory = state_dir(root, state)
    if history:
        store_path = directory / RUN_STORE
        if not store_path.is_file():
            raise click.ClickException(f"no run store at {store_path}: {_NOTHING_YET}")
        runs = run_history(store_path, limit=limit)
        if as_json:
            click.echo(json.dumps({"runs": runs}, indent=2, sort_keys=True))
        elif not runs:
            click.echo(f"the run store {store_path} holds no runs yet", err=True)
        else:
            click.echo("\n".join(_history_table(runs)))
        return
    path = directory / ("report.json" if as_json else "report.md")
    if not path.is_file():
        raise click.ClickException(f"no report at {path}: {_NOTHING_YET}")
    text = path.read_text(encoding="utf-8")
    if as_json:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"{path} is not valid JSON ({exc}); rerun the "
                                       "evolution to rewrite it") from None
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo(text.rstrip("\n"))
