"""Read-based test selection: test runs per candidate against the tests an edit can reach.

    python -m bench --only selection           # full run: records, refreshes the docs table
    python -m bench --quick --only selection   # one round per mode; prints only

Issue 20: a candidate that edits ``skills/refunds/SKILL.md`` should re-run the
tests that read that file, not the whole suite.  This part measures it on
``examples/skill-library`` (ten skills, six tasks each, half of them running
the agent in a subprocess), where the ground truth is known: a test reads only
its own skill's folder, so the tests an edit can change are the six of each
skill it touches.

The example is copied into a temporary git repository and evolved twice with
the same seed, ``python -m pytest --evolve skills/ --evolve-dry-run
--evolve-select all`` and then ``... --evolve-select reads``, each with a fresh
``.agentdescent`` state directory.  From each run's ``report.json`` the
``selection`` block gives the test runs on candidate states and the
candidates judged; every ``per_candidate`` entry's ``touched`` paths
(``skills/<name>/...``) give the skills it edited, hence the tests it can
affect (counted from the report's tasks, ``tests/test_<name>.py::...``).

Figures: ``runs_per_candidate`` {mode: candidate_runs / candidates},
``affected_per_candidate`` (the mean of the affected tests over the *reads*
run's candidates), ``ratio_to_affected`` {mode: runs per candidate / that
run's own affected tests per candidate} and ``misses`` (tests the reads run
found it should have re-run).  The goal of issue 20 is a reads ratio of at
most 1.5.  The runs count repeats: the acceptance test runs a task in pairs.

Runs that re-check kept results before a promotion (``confirm_runs``) are a
cost per promotion, not per candidate, and are reported apart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.records import commit_repo, machine
from pytest_agentdescent.sandboxing import plugin_args

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "skill-library"
RESULTS = ROOT / "bench" / "results" / "selection.json"
DOC = ROOT / "docs" / "performance.md"

MODES = ("all", "reads")
SEED = 0
QUICK_ROUNDS = 1
"""Rounds per mode in a quick run; a full run keeps the example's ``evolve_rounds``."""
GOAL = "reads <= 1.5x affected"
GOAL_RATIO = 1.5
TIMEOUT = 900.0
SKILL_PATH = re.compile(r"(?:^|/)skills/(?P<name>[^/]+)/")
TEST_MODULE = re.compile(r"^tests/test_(?P<name>[a-z0-9_]+)\.py::")
IGNORED = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".agentdescent")


def make_repo(path: Path) -> Path:
    """The example copied to ``path`` and committed (candidates are built from commits)."""
    shutil.copytree(EXAMPLE, path, ignore=IGNORED)
    commit_repo(path, message="skill-library")
    return path


def _env() -> dict[str, str]:
    """The caller's environment without ``PYTEST_ADDOPTS`` (its ``-p`` options go on the
    command line instead, as ``pytest --evolve`` hands them to its children)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "AGENTDESCENT_CHILD")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def evolve(repo: Path, mode: str, rounds: int | None = None) -> tuple[dict[str, Any], float]:
    """One dry run in ``mode`` with a fresh state directory: its report.json and seconds."""
    shutil.rmtree(repo / ".agentdescent", ignore_errors=True)
    argv = [sys.executable, "-m", "pytest", "--evolve", "skills/", "--evolve-dry-run",
            "--evolve-select", mode, "--evolve-seed", str(SEED),
            *plugin_args((), os.environ)]
    if rounds is not None:
        argv += ["--evolve-rounds", str(rounds)]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=repo, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    seconds = round(time.perf_counter() - started, 1)
    report_path = repo / ".agentdescent" / "report.json"
    if not report_path.is_file():
        raise RuntimeError(f"--evolve-select {mode} wrote no report.json (exit "
                           f"{done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    if report.get("error"):
        raise RuntimeError(f"--evolve-select {mode} ended on an error: {report['error']}")
    if not isinstance(report.get("selection"), Mapping):
        raise RuntimeError(f"--evolve-select {mode}: report.json has no selection block")
    return report, seconds


def tests_per_skill(report: Mapping[str, Any]) -> dict[str, int]:
    """Ground truth: skill name -> its tasks (``tests/test_gift_cards.py`` is gift-cards)."""
    counts: dict[str, int] = {}
    for task in report.get("tasks", []):
        found = TEST_MODULE.match(str(task.get("nodeid", "")))
        if found:
            name = found["name"].replace("_", "-")
            counts[name] = counts.get(name, 0) + 1
    return counts


def affected(touched: Sequence[str], per_skill: Mapping[str, int]) -> int:
    """The tasks an edit of ``touched`` can change: those of every skill it touches."""
    skills = {m["name"] for path in touched if (m := SKILL_PATH.search(path))}
    return sum(per_skill.get(name, 0) for name in skills)


def summarize(report: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """One mode's figures from its report's ``selection`` block."""
    block = report["selection"]
    per_skill = tests_per_skill(report)
    entries = list(block.get("per_candidate", []))
    reach = [affected(list(e.get("touched", [])), per_skill) for e in entries]
    candidates = int(block.get("candidates", 0))
    runs = int(block.get("candidate_runs", 0))
    return {
        "mode": block.get("mode"),
        "tests": block.get("tests"),
        "candidates": candidates,
        "candidate_runs": runs,
        "confirm_runs": int(block.get("confirm_runs", 0)),
        "runs_per_candidate": round(runs / candidates, 3) if candidates else None,
        "affected_per_candidate": round(statistics.mean(reach), 3) if reach else None,
        "misses": len(block.get("misses", [])),
        "tests_per_skill": per_skill,
        "reward_before": report.get("reward_before"),
        "reward_after": report.get("reward_after"),
        "rounds": report.get("rounds"),
        "sandbox": report.get("sandbox"),
        "seconds": seconds,
    }


def _ratio(mode: Mapping[str, Any]) -> float | None:
    runs, reach = mode["runs_per_candidate"], mode["affected_per_candidate"]
    return round(runs / reach, 3) if runs is not None and reach else None


def run(quick: bool, *, workdir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Both modes on a fresh copy of the example; the figures and each mode's details.

    ``quick`` evolves one round per mode (it shows the part runs, not the ratio).
    """
    rounds = QUICK_ROUNDS if quick else None
    base = Path(tempfile.mkdtemp(prefix="agentdescent-bench-selection-", dir=workdir))
    modes: dict[str, dict[str, Any]] = {}
    try:
        repo = make_repo(base / "skill-library")
        for mode in MODES:
            print(f"  selection: --evolve-select {mode} ...", file=sys.stderr, flush=True)
            report, seconds = evolve(repo, mode, rounds)
            modes[mode] = summarize(report, seconds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratios = {mode: _ratio(modes[mode]) for mode in MODES}
    reads = ratios["reads"]
    return {
        "benchmark": "selection",
        "command": "python -m bench --only selection",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "quick": quick,
        "runs_per_candidate": {mode: modes[mode]["runs_per_candidate"] for mode in MODES},
        "affected_per_candidate": modes["reads"]["affected_per_candidate"],
        "ratio_to_affected": ratios,
        "misses": modes["reads"]["misses"],
        "goal": GOAL,
        "meets_goal": None if reads is None else reads <= GOAL_RATIO,
        "modes": modes,
    }


def table(record: Mapping[str, Any]) -> str:
    """The docs table: per mode, candidates, runs and the ratio to the affected tests."""
    lines = ["| `--evolve-select` | candidates | test runs per candidate "
             "| affected tests per candidate | ratio | misses |",
             "|---|---:|---:|---:|---:|---:|"]
    for mode in MODES:
        row = record["modes"][mode]
        ratio = record["ratio_to_affected"][mode]
        lines.append(f"| `{mode}` | {row['candidates']} | {row['runs_per_candidate']} "
                     f"| {row['affected_per_candidate']} "
                     f"| {'' if ratio is None else f'{ratio:.2f}x'} | {row['misses']} |")
    verdict = {True: "meets", False: "misses", None: "cannot judge"}[record["meets_goal"]]
    lines += ["", f"Goal `{record['goal']}`: {verdict}. Seed {SEED}, sandbox "
                  f"`{record['modes']['reads']['sandbox']}`, {record['machine']['cpus']} CPUs, "
                  f"Python {record['machine']['python']}, {record['date']}."]
    return "\n".join(lines)
