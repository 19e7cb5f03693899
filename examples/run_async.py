"""The sync / async trade-off on a workload with heavy-tailed rollout durations, offline.

Run from the repository root (a few seconds, no network, no model):

    python -m examples.run_async            # a table
    python -m examples.run_async --json     # the same rows as JSON

The workload: 24 questions in 8 categories; an answer is right only once the
artifact states its category's rule, and the stand-in "model" proposes
exactly that rule for a failing question.  Rollout durations are
heavy-tailed, as real ones are: most questions answer in 10 ms, the two
"essay" categories take 150 ms, and one question hiccups (400 ms, a retried
rate limit) on every fourth call.  The same workload runs five ways:

* ``sync, worker order`` — ``evolve()`` rounds, four workers of which two run
  at once; the round waits for its slowest unit (the barrier);
* ``sync, longest first`` — the same with a ``DurationEstimator``: once the
  durations are known, each round starts its longest units first, so a slow
  one no longer starts last; rollouts that overran their prediction are
  ``result.stragglers``.  Here most of a round is the merge's evaluations,
  not the workers' rollouts, so the order saves little time: it learns the
  same rules in the same rounds, and what it adds is the measurement;
* ``async full / reflective / guarded`` — ``async_evolve()`` with
  ``async_ratio=4`` under each staleness policy: no barrier, so a slow
  rollout holds up only its own worker, paid for in stale proposals that the
  policy keeps, re-checks or discards.

Every run stops when all held-out questions pass (``target_reward=1.0``).
Read the ratios between the rows, not the absolute numbers: they depend on
the machine and its load, so rerun this rather than quoting them.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from agentdescent_core.artifacts import AppendRules
from agentdescent_core.loop import DurationEstimator, EvolutionResult, async_evolve, evolve
from agentdescent_core.tasks import Task

CATEGORIES = ("dates", "units", "names", "money", "lists", "codes", "essay-a", "essay-b")
FAST, SLOW, HICCUP = 0.01, 0.15, 0.4
HICCUP_TASK = "units-1"


def rule(category: str) -> str:
    return f"For {category} questions, answer in {category.upper()} form."


class Workload:
    """Run, reward and propose for the 24 questions; counts calls to make the hiccups."""

    def __init__(self) -> None:
        # question-major order: the held-out last third holds one question per category
        self.tasks = [Task(f"{c}-{i}", f"question {i} about {c}", {"category": c})
                      for i in range(3) for c in CATEGORIES]
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def seconds(self, task: Task) -> float:
        with self._lock:
            count = self._calls[task.id] = self._calls.get(task.id, 0) + 1
        if task.id == HICCUP_TASK and count % 4 == 0:
            return HICCUP
        return SLOW if str(task.meta["category"]).startswith("essay") else FAST

    def run(self, rendered: str, task: Task) -> str:
        time.sleep(self.seconds(task))
        category = str(task.meta["category"])
        return f"{category.upper()}:{task.id}" if rule(category) in rendered else "not sure"

    def reward(self, task: Task, output: Any) -> float:
        return 1.0 if output == f"{str(task.meta['category']).upper()}:{task.id}" else 0.0

    def propose(self, rendered: str, task: Task, output: Any, score: float) -> str:
        return rule(str(task.meta["category"]))


def _row(mode: str, result: EvolutionResult, seconds: float) -> dict[str, Any]:
    return {
        "mode": mode,
        "final_reward": result.final_reward,
        "stop_reason": str(result.stop_reason),
        "rounds": result.rounds,
        "rollouts": int(result.usage.get("rollouts", 0)),
        "run_calls": int(result.usage.get("run_calls", 0)),
        "stale_discarded": sum(h.discarded_stale for h in result.history),
        "stragglers": len(result.stragglers),
        "seconds": round(seconds, 2),
    }


def _timed(mode: str, call: Callable[[Workload], EvolutionResult]) -> dict[str, Any]:
    started = time.monotonic()
    result = call(Workload())
    if result.error is not None:
        raise SystemExit(f"{mode}: the run ended on an error: {result.error}")
    return _row(mode, result, time.monotonic() - started)


def run_all() -> list[dict[str, Any]]:
    """The five runs of the module doc, one row each."""
    common: dict[str, Any] = {"strategy": AppendRules(), "n_workers": 4, "held_out_frac": 1 / 3,
                              "target_reward": 1.0, "seed": 0}

    def sync(estimator: DurationEstimator | None) -> Callable[[Workload], EvolutionResult]:
        return lambda w: evolve(w.tasks, w.reward, run=w.run, propose=w.propose, rounds=20,
                                max_concurrency=2, duration_estimator=estimator, **common)

    def asynchronous(policy: str) -> Callable[[Workload], EvolutionResult]:
        return lambda w: async_evolve(w.tasks, w.reward, run=w.run, propose=w.propose,
                                      async_ratio=4, staleness_policy=policy, max_seconds=15.0,
                                      duration_estimator=DurationEstimator(), **common)

    rows = [_timed("sync, worker order", sync(None)),
            _timed("sync, longest first", sync(DurationEstimator()))]
    rows += [_timed(f"async {policy}", asynchronous(policy))
             for policy in ("full", "reflective", "guarded")]
    return rows


COLUMNS = ("mode", "final_reward", "rounds", "rollouts", "run_calls", "stale_discarded",
           "stragglers", "seconds")


def render(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned text table (``rounds`` counts merger sweeps for async rows)."""
    cells = [list(COLUMNS)] + [[str(row[c]) for c in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     for line in cells)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.run_async",
                                     description="The sync / async trade-off, offline.")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        # async_evolve warns that patience/rounds change meaning; none are passed here
        warnings.simplefilter("ignore", RuntimeWarning)
        rows = run_all()
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
