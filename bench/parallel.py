"""Parallel speed-up of evolve() / async_evolve() on an I/O-bound stub workload.

    python -m bench.parallel            # full run: records results and refreshes the docs table
    python -m bench.parallel --quick    # a smaller, faster workload; prints only
    python -m bench.parallel --json     # print the JSON record instead of the table
    python -m bench.parallel --series union-first   # re-measure one series, keep the others

The workload (issue 3): 16 categories x 4 tasks.  A task passes only when the
artifact holds its category's rule, which the initial artifact lacks; ``run``
sleeps 100 ms per call (standing in for a model call) and answers from the
rendered artifact; ``propose`` states the failing task's category rule.  The
time measured is the wall-clock of the whole evolve() call until every task
passes (``target_reward=1.0`` on all tasks), at n_workers = 1, 4, 8 with
``max_concurrency = n_workers``, on the synchronous and the asynchronous path,
all in this one process.

The evolve() arguments are the ones a user of a deterministic workload would
choose, recorded with the results: every task is an evaluation task
(``held_out_frac=0``), the evaluation pool is as wide as the worker pool
(``eval_concurrency = n_workers``: one worker is the serial loop, making one
model call at a time), and, because the rewards are deterministic, the
acceptance test runs at 1 candidate repeat against 3 base repeats instead of
the defaults' 2 against 24 (see ``docs/performance.md``).

Three series are measured: ``scaled`` (``eval_concurrency = n_workers``, the
headline keys), ``fixed`` (``eval_concurrency = 8`` at every worker count, so
only the number of workers changes) and ``union-first`` (``fixed`` with
``AggregatorConfig(tournament="union-first")``).  Their speed-ups are
recorded as ``speedup_<path>_<n>`` (scaled), ``..._fixed`` and
``..._union_first``.

A full run writes ``bench/results/parallel.json`` (keys ``speedup_sync_8``,
``speedup_async_8``, each configuration's seconds, rounds and call rates, the
machine, the date and the parameters) and rewrites the table between the
``parallel-table`` markers of ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts.strategies import AppendRules
from agentdescent_core.loop.async_evolve import async_evolve
from agentdescent_core.loop.evolve import evolve
from agentdescent_core.tasks import Task
from bench.records import machine, publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "parallel.json"
DOC = ROOT / "docs" / "performance.md"

WORKERS = (1, 4, 8)
TARGETS = {"sync": 5.0, "async": 6.0}


@dataclass(frozen=True)
class Workload:
    """The stub: ``categories`` x ``per_category`` tasks, ``sleep`` seconds per run call."""

    categories: int = 16
    per_category: int = 4
    sleep: float = 0.1
    repeats: int = 1
    baseline_repeats: int = 3

    def rule(self, category: int) -> str:
        return f"Category {category:02d} questions are answered with the word c{category:02d}-ok."

    def tasks(self) -> list[Task]:
        # Interleaved by category, so the strided shards of DataParallel give
        # every worker its own categories (worker i of n sees i, i + n, ...).
        return [
            Task(id=f"t{index:03d}", prompt=f"question {index}",
                 meta={"category": index % self.categories,
                       "gold": f"c{index % self.categories:02d}-ok"})
            for index in range(self.categories * self.per_category)
        ]

    def run(self, rendered: str, task: Task) -> str:
        time.sleep(self.sleep)  # the model call: I/O-bound, releases the GIL
        category = int(str(task.meta["category"]))
        return str(task.meta["gold"]) if self.rule(category) in rendered else "unknown"

    def reward(self, task: Task, output: object) -> float:
        return 1.0 if output == task.meta["gold"] else 0.0

    def propose(self, rendered: str, task: Task, output: object, score: float) -> str | None:
        if score >= 1.0:
            return None
        return self.rule(int(str(task.meta["category"])))

    def agg_config(self, tournament: str = "full") -> AggregatorConfig:
        return AggregatorConfig(repeats=self.repeats, baseline_repeats=self.baseline_repeats,
                                tournament=tournament)


FULL = Workload()
QUICK = Workload(categories=4, per_category=4, sleep=0.01)


@dataclass(frozen=True)
class Series:
    """One sweep over the worker counts: how wide the evaluation pool is, which tournament."""

    name: str
    eval_concurrency: int | None  # None: the same as n_workers
    tournament: str = "full"
    about: str = ""

    def pool(self, n_workers: int) -> int:
        return self.eval_concurrency or n_workers


SERIES = {
    s.name: s for s in (
        Series("scaled", None, about="eval_concurrency = n_workers (the headline)"),
        Series("fixed", 8, about="eval_concurrency = 8 for every worker count"),
        Series("union-first", 8, "union-first",
               about="eval_concurrency = 8, AggregatorConfig(tournament='union-first')"),
    )
}
DEFAULT_SERIES = ("scaled", "fixed", "union-first")


def measure(work: Workload, n_workers: int, mode: str, series: Series, *,
            max_seconds: float) -> dict[str, Any]:
    """One evolve() call to the target; its wall-clock, rounds and call rates."""
    eval_concurrency = series.pool(n_workers)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # async's "arguments change meaning"
        common: dict[str, Any] = dict(
            strategy=AppendRules(["Answer with one word."]), n_workers=n_workers,
            eval_concurrency=eval_concurrency, held_out_frac=0.0, target_reward=1.0,
            agg_config=work.agg_config(series.tournament), max_seconds=max_seconds, seed=0,
        )
        if mode == "sync":
            result = evolve(work.tasks(), work.reward, run=work.run, propose=work.propose,
                            max_concurrency=n_workers, rounds=4 * work.categories, **common)
        else:
            # Every worker is its own thread here; the run ends on the target or max_seconds,
            # so the worker-iteration budget (max_iters) is set out of the way.
            result = async_evolve(work.tasks(), work.reward, run=work.run,
                                  propose=work.propose, max_iters=100_000, **common)
    seconds = time.perf_counter() - started
    usage = result.usage
    calls = int(usage.get("evaluations", 0))
    rollouts = int(usage.get("rollouts", 0))
    return {
        "series": series.name,
        "mode": mode,
        "n_workers": n_workers,
        "eval_concurrency": eval_concurrency,
        "tournament": series.tournament,
        "seconds": round(seconds, 3),
        "reached_target": result.stop_reason == "target_reward",
        "stop_reason": result.stop_reason,
        "final_reward": result.final_reward,
        "error": result.error,
        "version": result.version,
        "rounds": len(result.history),
        "run_calls": calls,
        "worker_rollouts": rollouts,
        "run_calls_per_second": round(calls / seconds, 2) if seconds else None,
        "rollouts_per_second": round(rollouts / seconds, 2) if seconds else None,
        "outcomes": dict(result.outcomes()),
        "fused": sum(h.fused for h in result.history),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }




def measure_series(work: Workload, names: Sequence[str], *, max_seconds: float,
                   progress: bool = True) -> list[dict[str, Any]]:
    """Every (series, path, worker count) configuration of ``names``, one after the other."""
    rows: list[dict[str, Any]] = []
    for name in names:
        series = SERIES[name]
        for mode in ("sync", "async"):
            for n in WORKERS:
                row = measure(work, n, mode, series, max_seconds=max_seconds)
                rows.append(row)
                if progress:
                    print(f"  {name:11} {mode:5} n_workers={n} "
                          f"eval_concurrency={row['eval_concurrency']}: {row['seconds']:7.2f} s "
                          f"({row['stop_reason']}, {row['rounds']} rounds, "
                          f"{row['run_calls']} run calls)", file=sys.stderr, flush=True)
    return rows


def summarize(work: Workload, rows: list[dict[str, Any]], *, max_seconds: float
              ) -> dict[str, Any]:
    """The record: parameters, every run, and the speed-ups of each series present."""
    names = [n for n in SERIES if any(r["series"] == n for r in rows)]
    rows = sorted(rows, key=lambda r: (list(SERIES).index(r["series"]),
                                       r["mode"] != "sync", r["n_workers"]))
    record: dict[str, Any] = {
        "benchmark": "parallel",
        "date": max(r["date"] for r in rows),
        "machine": machine(),
        "parameters": {
            "categories": work.categories,
            "tasks_per_category": work.per_category,
            "tasks": work.categories * work.per_category,
            "sleep_per_run_call_s": work.sleep,
            "workers": list(WORKERS),
            "max_concurrency": "n_workers",
            "held_out_frac": 0.0,
            "target_reward": 1.0,
            "strategy": "AppendRules",
            "agg_config": {"repeats": work.repeats, "baseline_repeats": work.baseline_repeats},
            "max_seconds": max_seconds,
            "series": {n: SERIES[n].about for n in names},
        },
        "targets": {f"speedup_{mode}_8": target for mode, target in TARGETS.items()},
        "runs": rows,
    }
    for name in names:
        suffix = "" if name == "scaled" else "_" + name.replace("-", "_")
        for mode in ("sync", "async"):
            by_n = {r["n_workers"]: r for r in rows if r["mode"] == mode and r["series"] == name}
            ok = set(by_n) == set(WORKERS) and all(r["reached_target"] for r in by_n.values())
            for n, row in by_n.items():
                speedup = by_n[1]["seconds"] / row["seconds"] if ok else None
                row["speedup"] = round(speedup, 2) if speedup else None
                record[f"speedup_{mode}_{n}{suffix}"] = row["speedup"]
            value = record.get(f"speedup_{mode}_8{suffix}")
            record[f"meets_{mode}{suffix}"] = value is not None and value >= TARGETS[mode]
    return record


def table(record: dict[str, Any]) -> str:
    p = record["parameters"]
    lines = [
        f"{p['categories']} categories x {p['tasks_per_category']} tasks, "
        f"{p['sleep_per_run_call_s'] * 1000:.0f} ms per run call, "
        f"repeats {p['agg_config']['repeats']} / baseline {p['agg_config']['baseline_repeats']}; "
        f"{record['machine']['cpus']} CPUs, Python {record['machine']['python']}, "
        f"{record['date']}.",
        "",
        "| series | path | workers | eval_concurrency | seconds to all tasks passing "
        "| speed-up vs 1 worker | rounds | versions | run calls | run calls/s "
        "| worker rollouts/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in record["runs"]:
        speedup = row.get("speedup")
        shown = f"{speedup:.2f}x" if speedup is not None else "n/a"
        seconds = f"{row['seconds']:.2f}" + ("" if row["reached_target"] else
                                              f" ({row['stop_reason']})")
        lines.append(
            f"| {row['series']} | {row['mode']} | {row['n_workers']} | {row['eval_concurrency']} "
            f"| {seconds} | {shown} | {row['rounds']} | {row['version']} | {row['run_calls']} "
            f"| {row['run_calls_per_second']} | {row['rollouts_per_second']} |"
        )
    lines.append("")
    for name in record["parameters"]["series"]:
        suffix = "" if name == "scaled" else "_" + name.replace("-", "_")
        for mode in ("sync", "async"):
            key = f"speedup_{mode}_8{suffix}"
            value = record.get(key)
            verdict = "meets" if record.get(f"meets_{mode}{suffix}") else "misses"
            shown = f"{value:.2f}x" if value is not None else "n/a"
            lines.append(f"- `{key}` ({mode}; {SERIES[name].about}): {shown} — {verdict} "
                         f"the {TARGETS[mode]:.0f}x target.")
    return "\n".join(lines)




def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parallel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="4 categories x 4 tasks at 10 ms per call, 'scaled' only; print only")
    parser.add_argument("--json", action="store_true", help="print the JSON record")
    parser.add_argument("--series", action="append", choices=list(SERIES),
                        help="measure only this series (repeatable); the recorded runs of the "
                             "other series are kept in the results file")
    parser.add_argument("--no-write", action="store_true",
                        help="do not write the results file or the docs table")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="budget of each evolve() call (default 900)")
    args = parser.parse_args(argv)
    work = QUICK if args.quick else FULL
    names = ("scaled",) if args.quick else tuple(args.series or DEFAULT_SERIES)
    rows = measure_series(work, names, max_seconds=args.max_seconds, progress=not args.json)
    write = not (args.quick or args.no_write)
    if write and args.series and RESULTS.exists():
        kept = json.loads(RESULTS.read_text(encoding="utf-8")).get("runs", [])
        rows = [r for r in kept if r.get("series") not in names] + rows
    record = summarize(work, rows, max_seconds=args.max_seconds)
    record["quick"] = bool(args.quick)
    print(json.dumps(record, indent=2) if args.json else table(record))
    if write:
        publish(record, RESULTS, DOC, "parallel-table", table(record), announce=not args.json)
    reached = all(row["reached_target"] for row in record["runs"])
    return 0 if reached else 1


if __name__ == "__main__":
    raise SystemExit(main())
