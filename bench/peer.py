"""This project against the reference implementation (``agentdescent`` on PyPI), one process.

    python -m bench.peer            # full run; prints the record
    python -m bench.peer --quick    # a small workload; prints the record

The reference is installed in the bench's own virtualenv, ``bench/.peer-venv``
(created with ``--system-site-packages`` so this project, installed in the
outer environment, is importable there too), never as a dependency of the
project.  When the current interpreter cannot import ``agentdescent``, this
module creates that virtualenv if needed and re-executes itself in it, so
both engines run in one process, on the same stub workload, with the same
latency per task call, the same number of workers and the same stopping rule.
If the reference cannot be installed or imported, the record is
``{"error": "..."}`` and the reason is printed on stderr.

Two measurements (``docs/performance.md`` says why each is shaped so):

``wall-clock``  the 16-rule stub of ``bench.parallel`` (16 categories x 4
    tasks, 100 ms per run call), 8 workers, ``max_concurrency`` and
    ``eval_concurrency`` 8, ``AppendRules``, ``held_out_frac=0.5`` (the
    reference refuses 0), ``target_reward=1.0``: seconds until every
    held-out task passes, sync and async, each engine with its default
    acceptance settings (this project's: the ``betting`` test), and this
    project also with its former default, the ``paired`` permutation test
    (2 candidate repeats against 24 base repeats); task calls ("run calls",
    every call of ``run``) are counted alongside the seconds.
``false-accept`` the same tasks made flaky with no possible improvement:
    every task passes with probability 0.6 whatever the artifact says, and
    every proposal is a new, useless rule.  Every commit is a false accept;
    the rate is commits over merge decisions (rounds that judged a candidate),
    with an exact 95 % interval.  The latency of this part is shorter (5 ms)
    than the wall-clock part's because the decisions, not the time, are
    counted; it is the same for both engines.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy.stats import beta as beta_dist

from bench.parallel import Workload

ROOT = Path(__file__).resolve().parents[1]
# Where the reference's virtualenv lives; AGENTDESCENT_BENCH_PEER_VENV moves it
# (the tests point it at a temporary directory to see a failed install handled).
VENV = Path(os.environ.get("AGENTDESCENT_BENCH_PEER_VENV") or ROOT / "bench" / ".peer-venv")
REFERENCE = "agentdescent"
REFERENCE_VERSION = "0.7.0"
WORKERS = 8
HELD_OUT_FRAC = 0.5
PASS_PROBABILITY = 0.6


@dataclass(frozen=True)
class Plan:
    """Sizes of one peer run: the wall-clock workload and the false-accept one."""

    work: Workload
    null_work: Workload
    null_rounds: int
    max_seconds: float


FULL = Plan(Workload(), Workload(sleep=0.005), null_rounds=100, max_seconds=300.0)
QUICK = Plan(Workload(categories=4, per_category=4, sleep=0.01),
             Workload(categories=4, per_category=4, sleep=0.002), null_rounds=16,
             max_seconds=60.0)


# ---------------------------------------------------------------- the two engines


@dataclass(frozen=True)
class Engine:
    """What a measurement needs of an engine: its Task type, evolve, async_evolve, strategy."""

    name: str
    task: Callable[..., Any]
    evolve: Callable[..., Any]
    async_evolve: Callable[..., Any]
    strategy: Callable[[], Any]
    agg_config: Callable[[], Any] | None = None


def ours(acceptance: str | None = None) -> Engine:
    """This project with its defaults, or with its former defaults (``"paired"``).

    The former defaults are the ``paired`` permutation test (2 candidate
    repeats, 24 base repeats) and the full fusion tournament.
    """
    from agentdescent_core.aggregator import AggregatorConfig
    from agentdescent_core.artifacts.strategies import AppendRules
    from agentdescent_core.loop.async_evolve import async_evolve
    from agentdescent_core.loop.evolve import evolve
    from agentdescent_core.tasks import Task

    config = ((lambda: AggregatorConfig(acceptance=acceptance, tournament="full"))
              if acceptance else None)
    return Engine("ours", Task, evolve, async_evolve, AppendRules, config)


def reference() -> Engine:
    module = importlib.import_module(REFERENCE)
    return Engine("reference", module.Task, module.evolve, module.async_evolve,
                  module.AppendRules)


def _tasks(engine: Engine, work: Workload) -> list[Any]:
    return [engine.task(id=f"t{i:03d}", prompt=f"question {i}",
                        meta={"category": i % work.categories,
                              "gold": f"c{i % work.categories:02d}-ok"})
            for i in range(work.categories * work.per_category)]


def _common(engine: Engine) -> dict[str, Any]:
    options: dict[str, Any] = dict(n_workers=WORKERS, eval_concurrency=WORKERS,
                                   held_out_frac=HELD_OUT_FRAC, seed=0)
    if engine.agg_config is not None:
        options["agg_config"] = engine.agg_config()
    return options


def time_to_target(engine: Engine, work: Workload, mode: str, max_seconds: float
                   ) -> dict[str, Any]:
    """One run of the stub to ``target_reward=1.0``: seconds, rounds, outcomes."""
    calls = [0]
    lock = threading.Lock()

    def run(rendered: str, task: Any) -> str:
        with lock:
            calls[0] += 1
        return work.run(rendered, task)

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # async's "arguments change meaning", etc.
        options = dict(run=run, propose=work.propose, strategy=engine.strategy(),
                       target_reward=1.0, max_seconds=max_seconds, **_common(engine))
        if mode == "sync":
            result = engine.evolve(_tasks(engine, work), work.reward, rounds=4 * work.categories,
                                   max_concurrency=WORKERS, **options)
        else:
            result = engine.async_evolve(_tasks(engine, work), work.reward, max_iters=100_000,
                                         **options)
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 3), "reached_target": result.stop_reason == "target_reward",
            "stop_reason": str(result.stop_reason), "final_reward": result.final_reward,
            "rounds": len(result.history), "run_calls": calls[0],
            "outcomes": {str(k): int(v) for k, v in dict(result.outcomes()).items()},
            "error": result.error}


def false_accepts(engine: Engine, work: Workload, rounds: int) -> dict[str, Any]:
    """The flaky, no-effect variant run for ``rounds`` sync rounds: commits over decisions."""
    lock = threading.Lock()
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    proposals = [0]

    def run(rendered: str, task: Any) -> str:
        time.sleep(work.sleep)
        with lock:
            seen[(rendered, task.id)] += 1
            draw = seen[(rendered, task.id)]
        # Deterministic per (artifact, task, n-th call): a rerun draws the same outcomes.
        digest = hashlib.sha256(f"{task.id}|{draw}|{rendered}".encode()).digest()
        passed = int.from_bytes(digest[:8], "big") / 2**64 < PASS_PROBABILITY
        return str(task.meta["gold"]) if passed else "unknown"

    def propose(rendered: str, task: Any, output: object, score: float) -> str | None:
        if score >= 1.0:
            return None
        with lock:
            proposals[0] += 1
            number = proposals[0]
        return f"Note {number}: category {task.meta['category']:02d} questions deserve care."

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = engine.evolve(_tasks(engine, work), work.reward, run=run, propose=propose,
                               strategy=engine.strategy(), rounds=rounds,
                               max_concurrency=WORKERS, **_common(engine))
    outcomes = {str(k): int(v) for k, v in dict(result.outcomes()).items()}
    decisions = sum(outcomes.values())
    committed = outcomes.get("committed", 0)
    low = float(beta_dist.ppf(0.025, committed, decisions - committed + 1)) if committed else 0.0
    high = (float(beta_dist.ppf(0.975, committed + 1, decisions - committed))
            if committed < decisions else 1.0)
    return {"rate": round(committed / decisions, 4) if decisions else None,
            "ci_low": round(low, 4), "ci_high": round(high, 4), "committed": committed,
            "decisions": decisions, "outcomes": outcomes, "rounds": rounds,
            "seconds": round(time.perf_counter() - started, 3), "error": result.error}


def hitchhikers(engine: Engine, work: Workload, rounds: int) -> dict[str, Any]:
    """Half the proposals useless: how many useless notes ride into dev inside fused versions.

    Every other proposal is a useless note instead of the failing task's rule.
    Every task is an evaluation task (``held_out_frac=0``, as the pytest plugin
    runs: the whole suite is the reward), so the acceptance test pairs the tasks
    a proposal was written for.  Counted: notes proposed, notes in the final
    dev state (each one a hitchhiker: alone, a note is never accepted).
    """
    lock = threading.Lock()
    proposals = [0]

    def propose(rendered: str, task: Any, output: object, score: float) -> str | None:
        if score >= 1.0:
            return None
        with lock:
            proposals[0] += 1
            number = proposals[0]
        if number % 2 == 0:
            return f"Note {number}: category {task.meta['category']:02d} questions deserve care."
        return work.rule(int(str(task.meta["category"])))

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = {**_common(engine), "held_out_frac": 0.0}
        result = engine.evolve(_tasks(engine, work), work.reward, run=work.run, propose=propose,
                               strategy=engine.strategy(), rounds=rounds, target_reward=1.0,
                               max_concurrency=WORKERS, **options)
    notes = (proposals[0]) // 2
    kept = str(result.rendered).count("Note ")
    return {"notes_proposed": notes, "notes_kept": kept, "proposals": proposals[0],
            "final_reward": result.final_reward, "rounds": len(result.history),
            "outcomes": {str(k): int(v) for k, v in dict(result.outcomes()).items()},
            "seconds": round(time.perf_counter() - started, 3), "error": result.error}


def measure(plan: Plan, *, progress: bool = True) -> dict[str, Any]:
    """Every measurement, both engines, in this process (which must import the reference)."""
    engines = {"ours": ours(), "ours_paired": ours("paired"), "reference": reference()}
    runs: dict[str, dict[str, Any]] = {}
    for mode in ("sync", "async"):
        for key, engine in engines.items():
            row = time_to_target(engine, plan.work, mode, plan.max_seconds)
            runs[f"{key}:{mode}"] = row
            if progress:
                print(f"  peer: {key:17} {mode:5} {row['seconds']:7.2f} s ({row['stop_reason']}, "
                      f"{row['rounds']} rounds, {row['run_calls']} run calls)",
                      file=sys.stderr, flush=True)
    null: dict[str, dict[str, Any]] = {}
    for key in ("ours", "reference"):
        null[key] = false_accepts(engines[key], plan.null_work, plan.null_rounds)
        if progress:
            row = null[key]
            print(f"  peer: {key:17} false accepts {row['committed']}/{row['decisions']} "
                  f"({row['seconds']:.1f} s)", file=sys.stderr, flush=True)

    riders = {key: hitchhikers(engines[key], plan.null_work, plan.null_rounds)
              for key in ("ours", "ours_paired")}
    if progress:
        for key, row in riders.items():
            print(f"  peer: {key:17} hitchhikers {row['notes_kept']} of "
                  f"{row['notes_proposed']} useless notes kept ({row['seconds']:.1f} s)",
                  file=sys.stderr, flush=True)

    def pair(ours_value: Any, ref_value: Any) -> dict[str, Any]:
        return {"ours": ours_value, "reference": ref_value}

    metrics: dict[str, dict[str, Any]] = {}
    for mode in ("sync", "async"):
        ref_s = runs[f"reference:{mode}"]["seconds"]
        ref_calls = runs[f"reference:{mode}"]["run_calls"]
        for key, suffix in (("ours", ""), ("ours_paired", "_paired")):
            our_s = runs[f"{key}:{mode}"]["seconds"]
            metrics[f"seconds_{mode}_{WORKERS}{suffix}"] = pair(our_s, ref_s)
            metrics[f"wall_clock_ratio_{mode}_{WORKERS}{suffix}"] = pair(
                round(our_s / ref_s, 2) if ref_s else None, 1.0)
            our_calls = runs[f"{key}:{mode}"]["run_calls"]
            metrics[f"run_calls_{mode}_{WORKERS}{suffix}"] = pair(our_calls, ref_calls)
            metrics[f"run_calls_ratio_{mode}_{WORKERS}{suffix}"] = pair(
                round(our_calls / ref_calls, 2) if ref_calls else None, 1.0)
        metrics[f"reached_target_{mode}"] = pair(runs[f"ours:{mode}"]["reached_target"],
                                                 runs[f"reference:{mode}"]["reached_target"])
    metrics["false_accept"] = pair(null["ours"]["rate"], null["reference"]["rate"])
    metrics["false_accept_decisions"] = pair(null["ours"]["decisions"],
                                             null["reference"]["decisions"])
    metrics["useless_notes_kept"] = pair(riders["ours"]["notes_kept"], None)
    metrics["useless_notes_proposed"] = pair(riders["ours"]["notes_proposed"], None)
    metrics["useless_notes_kept_paired"] = pair(riders["ours_paired"]["notes_kept"], None)
    module = importlib.import_module(REFERENCE)
    return {
        "metrics": metrics,
        "hitchhikers": riders,
        "reference_version": str(getattr(module, "__version__", "unknown")),
        "parameters": {
            "workers": WORKERS, "max_concurrency": WORKERS, "eval_concurrency": WORKERS,
            "held_out_frac": HELD_OUT_FRAC, "strategy": "AppendRules (each engine's own)",
            "tasks": plan.work.categories * plan.work.per_category,
            "categories": plan.work.categories,
            "sleep_per_run_call_s": plan.work.sleep, "target_reward": 1.0,
            "sync_rounds_cap": 4 * plan.work.categories, "async_max_iters": 100_000,
            "max_seconds": plan.max_seconds, "seed": 0,
            "false_accept": {"tasks": plan.null_work.categories * plan.null_work.per_category,
                             "sleep_per_run_call_s": plan.null_work.sleep,
                             "pass_probability": PASS_PROBABILITY,
                             "rounds": plan.null_rounds, "path": "sync"},
            "ours_agg_config": "defaults (betting test: one pair per task, then pairs "
                               "where they tell; union-first tournament); ours_paired: "
                               "AggregatorConfig(acceptance='paired', tournament='full') "
                               "(2 candidate repeats, 24 base repeats: the former defaults)",
            "hitchhikers": {"held_out_frac": 0.0, "useless": "every other proposal",
                            "rounds": plan.null_rounds,
                            "sleep_per_run_call_s": plan.null_work.sleep},
            "reference_agg_config": "defaults (Beta test, base_delta=0.5, accept_samples=4000)",
        },
        "runs": runs,
        "false_accept_runs": null,
    }


# ---------------------------------------------------------------- the reference's interpreter


def _venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _check(python: Path) -> str | None:
    """None when ``python`` imports both engines, else why not."""
    done = subprocess.run([str(python), "-c", f"import {REFERENCE}, agentdescent_core"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def ensure_venv(*, progress: bool = True) -> tuple[Path | None, str | None]:
    """The interpreter that has the reference installed (created on first use), or why not."""
    python = _venv_python()
    if python.exists() and _check(python) is None:
        return python, None
    steps = [[sys.executable, "-m", "venv", "--system-site-packages", str(VENV)],
             [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"{REFERENCE}=={REFERENCE_VERSION}"]]
    for argv in steps:
        if progress:
            print(f"  peer: {' '.join(argv[1:] if argv[0] == sys.executable else argv)}",
                  file=sys.stderr, flush=True)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"could not run {argv[0]}: {exc}"
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            return None, (f"installing the reference {REFERENCE}=={REFERENCE_VERSION} into "
                          f"{VENV} failed: {' / '.join(tail)}; the peer part needs the "
                          "package index (or install it there yourself with "
                          f"'{python} -m pip install {REFERENCE}=={REFERENCE_VERSION}')")
    why = _check(python)
    if why is not None:
        return None, f"{VENV} cannot import both engines: {why}"
    return python, None


def run(quick: bool, *, progress: bool = True) -> dict[str, Any]:
    """The peer record, measured here or in the reference's interpreter, or ``{"error"}``."""
    plan = QUICK if quick else FULL
    try:
        importlib.import_module(REFERENCE)
    except ImportError:
        pass
    else:
        return measure(plan, progress=progress)
    python, why = ensure_venv(progress=progress)
    if python is None:
        return _error(why or "the reference could not be installed")
    argv = [str(python), "-m", "bench.peer", "--json", *(["--quick"] if quick else [])]
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=None if progress else subprocess.PIPE, text=True, check=False)
    try:
        record = json.loads(done.stdout)
    except json.JSONDecodeError:
        return _error(f"the peer run in {python} exited {done.returncode} without a record")
    return record if isinstance(record, dict) else _error("the peer run printed no object")


def _error(message: str) -> dict[str, Any]:
    print(f"  peer: skipped: {message}", file=sys.stderr, flush=True)
    return {"error": message}


def table(record: Mapping[str, Any]) -> str:
    """The side-by-side docs table of the peer part."""
    if "error" in record:
        return f"Not measured: {record['error']}"
    m, p = record["metrics"], record["parameters"]
    fa = record["false_accept_runs"]

    def interval(key: str) -> str:
        row = fa[key]
        return (f"{row['rate'] * 100:.1f} % ({row['committed']}/{row['decisions']}; "
                f"95 % CI {row['ci_low'] * 100:.1f}–{row['ci_high'] * 100:.1f} %)")

    lines = [
        f"{p['tasks']} tasks ({p['categories']} rules), "
        f"{p['sleep_per_run_call_s'] * 1000:.0f} ms per run call, {p['workers']} workers, "
        f"held_out_frac {p['held_out_frac']}; reference `agentdescent` "
        f"{record['reference_version']}.",
        "",
        "| measurement | this project | reference | ratio (ours / reference) |",
        "|---|---:|---:|---:|",
    ]
    for mode in ("sync", "async"):
        for suffix, label in (("", "defaults (`betting`, union first)"),
                              ("_paired", "former defaults (`paired`, full tournament)")):
            key = f"seconds_{mode}_{p['workers']}{suffix}"
            if key not in m:
                continue
            ours_s, ref_s = m[key]["ours"], m[key]["reference"]
            ratio = m[f"wall_clock_ratio_{mode}_{p['workers']}{suffix}"]["ours"]
            runs = record["runs"]
            ours_calls = runs[f"{'ours' if not suffix else 'ours' + suffix}:{mode}"]["run_calls"]
            ref_calls = runs[f"reference:{mode}"]["run_calls"]
            calls_ratio = ours_calls / ref_calls if ref_calls else float("nan")
            lines.append(f"| seconds to all held-out tasks passing, {mode}, ours: {label} "
                         f"| {ours_s:.2f} s ({ours_calls:,} run calls) "
                         f"| {ref_s:.2f} s ({ref_calls:,} run calls) "
                         f"| {ratio:.2f}x seconds, {calls_ratio:.2f}x run calls |")
    lines.append(f"| false accepts (flaky, no effect; {p['false_accept']['rounds']} sync rounds) "
                 f"| {interval('ours')} | {interval('reference')} | |")
    riders = record.get("hitchhikers")
    if riders:
        for key, label in (("ours", "defaults"), ("ours_paired", "former defaults")):
            row = riders[key]
            lines.append(f"| useless notes kept in dev (half the proposals useless, "
                         f"held_out_frac 0), ours: {label} | {row['notes_kept']} of "
                         f"{row['notes_proposed']} | not measured | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small workload")
    parser.add_argument("--json", action="store_true", help="print the JSON record")
    args = parser.parse_args(argv)
    record = run(args.quick, progress=True)
    print(json.dumps(record, indent=2) if args.json else table(record))
    return 1 if "error" in record else 0


if __name__ == "__main__":
    raise SystemExit(main())
