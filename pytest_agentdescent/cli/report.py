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


#: The loop kernel's stop names, as report.json (and the run's summary) spell them.
_STOP_NAMES = {"max_generations": "rounds", "target": "target_reward"}


def run_history(store_path: Path, *, limit: int | None = None,
                last: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every run in the store (newest first) with its replayed report, as JSON-ready dicts.

    Each run also gets the fields in report.json's names: ``rounds``,
    ``target_reward``, ``stop_reason``, ``calls`` (the kernel records the
    proposer calls of a round as its cost), ``cost_usd`` and ``dry_run``.
    ``reward_before`` (the baseline), ``cost_usd`` and the exact stop reason
    are known only for the run that wrote ``last`` (the state directory's
    report.json, which each run overwrites); for the others they are None.
    """
    from agentdescent_core.loop.durable import SqliteRunStore
    from agentdescent_core.loop.kernel import load_report

    store = SqliteRunStore(store_path)
    try:
        out: list[dict[str, Any]] = []
        for record in store.runs(limit=limit):
            entry = {**record.to_dict(), "report": load_report(store, record.run_id).to_dict()}
            entry.update(_run_fields(entry, last))
            out.append(entry)
        return out
    finally:
        store.close()


def _run_fields(run: dict[str, Any], last: dict[str, Any] | None) -> dict[str, Any]:
    rep = run["report"]
    config = rep.get("config") or run.get("config") or {}
    mine = last if last and (last.get("run") or {}).get("id") == run["run_id"] else None
    stopped = rep.get("stopped_reason")
    calls = sum(int(g.get("cost") or 0) for g in rep.get("generations") or [])
    if mine is None:
        return {"rounds": config.get("max_generations"), "target_reward": config.get("target"),
                "stop_reason": _STOP_NAMES.get(stopped, stopped) if stopped else None,
                "calls": calls, "cost_usd": None, "reward_before": None,
                "dry_run": run.get("key") is None}  # a dry run is never resumed: no key
    model = mine.get("model") or {}
    cost = mine.get("cost_usd")
    if cost is None and isinstance(model, dict):
        cost = model.get("cost_usd")
    return {"rounds": mine.get("rounds", config.get("max_generations")),
            "target_reward": mine.get("target_reward", config.get("target")),
            "stop_reason": mine.get("stop_reason") or stopped,
            "calls": mine.get("calls", calls), "cost_usd": cost,
            "reward_before": mine.get("reward_before"), "dry_run": bool(mine.get("dry_run"))}


def _usd(value: object) -> str:
    return f"${value:.4f}" if isinstance(value, (int, float)) else ""


def _history_table(runs: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for run in runs:
        rep = run["report"]
        generations = rep.get("generations") or []
        baseline = run.get("reward_before")
        lines.append(
            f"run {run['run_id']}  {run['status']}  started {_when(run['created_at'])} UTC  "
            f"{'dry-run' if run['dry_run'] else 'live'}  rounds {_fmt(run['rounds'])}  "
            f"target_reward {_fmt(run['target_reward'])}  baseline {_fmt(baseline)}  "
            f"best {_fmt(rep.get('best_reward'))}  stopped {run['stop_reason'] or '-'}  "
            f"calls {run['calls']}" + (f"  cost {_usd(run['cost_usd'])}"
                                       if _usd(run["cost_usd"]) else ""))
        if generations:
            lines.append(f"  {'round':>5}  {'action':<8}  {'reward':>7}  {'gain':>7}  "
                         f"{'calls':>5}  reason")
        if baseline is not None:
            lines.append(f"  {0:>5}  {'baseline':<8}  {_fmt(baseline):>7}  {'-':>7}  "
                         f"{0:>5}  the artifact as it was (report.json reward_before)")
        for gen in generations:
            number = int(gen.get("generation") or 0)
            gain, reason = gen.get("gain"), gen.get("reason") or ""
            if number == 0:  # the kernel's first generation is round 1, not the baseline
                reward = gen.get("reward")
                gain = (reward - baseline if isinstance(reward, (int, float))
                        and baseline is not None else None)
                reason = ("the first round, against the baseline" if baseline is not None
                          else "the first round (baseline unknown: only the last run's "
                               "report.json has it)")
            round_no = (gen.get("evidence") or {}).get("round", number + 1)
            lines.append(
                f"  {round_no:>5}  {gen.get('action', '-'):<8}  "
                f"{_fmt(gen.get('reward')):>7}  {_fmt(gain):>7}  "
                f"{int(gen.get('cost') or 0):>5}  {reason}")
        for failure in rep.get("failures") or []:
            lines.append(f"  failure: {json.dumps(failure, sort_keys=True)}")
    return lines


def _last_report(directory: Path) -> dict[str, Any] | None:
    """The state directory's report.json (the last run's), or None when absent or unreadable."""
    try:
        data = json.loads((directory / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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
        runs = run_history(store_path, limit=limit, last=_last_report(directory))
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
