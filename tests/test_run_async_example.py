"""``python -m examples.run_async``: the offline sync / async trade-off example runs as documented.

It runs the way the docs show it, as a module from the repository root, in a
child interpreter; the rows are checked for what the runs decide (the reward
reached, how the run stopped, the counters), never for how long they took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ["sync, worker order", "sync, longest first", "async full", "async reflective",
         "async guarded"]


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "examples.run_async", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_example_prints_one_row_per_mode_and_every_run_learns() -> None:
    completed = run_example("--json")
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows: list[dict[str, Any]] = json.loads(completed.stdout)
    assert [row["mode"] for row in rows] == MODES
    for row in rows:
        assert row["rollouts"] > 0
        assert row["run_calls"] >= row["rollouts"]
        assert row["stale_discarded"] >= 0
        assert row["stragglers"] >= 0
    sync, longest = rows[0], rows[1]
    # the synchronous runs are bounded by rounds, not by time: both reach the target,
    # and starting units in another order changes when they run, not what is learned
    assert sync["final_reward"] == longest["final_reward"] == 1.0
    assert sync["stop_reason"] == longest["stop_reason"] == "target_reward"
    assert sync["rounds"] == longest["rounds"]
    assert sync["stragglers"] == 0  # no estimator, nothing is measured
    for row in rows[2:]:  # async runs are bounded by max_seconds as well
        assert row["stop_reason"] in ("target_reward", "max_seconds"), row
        assert row["final_reward"] is not None


def test_the_table_has_a_header_and_the_same_rows() -> None:
    completed = run_example()
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["mode", "final_reward", "rounds"]
    assert [line.split("  ")[0].strip() for line in lines[1:]] == MODES


def test_a_bad_option_is_a_usage_error() -> None:
    completed = run_example("--no-such-option")
    assert completed.returncode == 2
    assert "--no-such-option" in completed.stderr
