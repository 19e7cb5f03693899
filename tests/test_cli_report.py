"""``agentdescent report``: the last run's report files, and the run store's history."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import user_git, write

from agentdescent_core.loop.durable import SqliteRunStore
from agentdescent_core.loop.kernel import LoopConfig, LoopContext, LoopKernel, LoopObservation
from pytest_agentdescent.cli import main

ROOT = Path(__file__).resolve().parents[1]


def invoke(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, ["report", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The support-bot example after one real round of `pytest --evolve` (no model)."""
    repo = tmp_path_factory.mktemp("report") / "bot"
    shutil.copytree(ROOT / "examples" / "support-bot", repo,
                    ignore=shutil.ignore_patterns("__pycache__", ".agentdescent"))
    user_git(repo.parent, "init", "--quiet", "--initial-branch=main", str(repo))
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "the bot")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--evolve", "skills/", "--evolve-rounds", "1",
         "-p", "no:randomly", "-p", "no:cacheprovider", "-q"],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return repo


def test_shows_the_last_report_as_markdown_and_json(
        evolved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = invoke(evolved, monkeypatch)
    assert code == 0
    markdown = (evolved / ".agentdescent/report.md").read_text(encoding="utf-8")
    assert out == markdown.rstrip("\n") + "\n"
    code, out, _ = invoke(evolved / "skills", monkeypatch, "--json")  # from a subdirectory
    assert code == 0
    data = json.loads(out)
    stored = json.loads((evolved / ".agentdescent/report.json").read_text(encoding="utf-8"))
    assert data == stored
    assert data["reward_after"] > data["reward_before"]


def test_state_dir_from_the_ini_and_from_the_option(
        evolved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", str(repo))
    write(repo / "pytest.ini", "[pytest]\nevolve_state_dir = build/state\n")
    write(repo / "build/state/report.md", "# from the ini's state dir\n")
    write(repo / "elsewhere/report.md", "# from --state-dir\n")
    assert invoke(repo, monkeypatch)[1] == "# from the ini's state dir\n"
    assert invoke(repo, monkeypatch, "--state-dir", "elsewhere")[1] == "# from --state-dir\n"


def test_nothing_yet_is_a_clear_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", str(repo))
    for args in ((), ("--json",), ("--history",)):
        code, out, err = invoke(repo, monkeypatch, *args)
        assert code == 1
        assert out == ""
        assert "run `pytest --evolve PATH`" in err
        assert str(repo / ".agentdescent") in err
    code, _, err = invoke(tmp_path, monkeypatch)
    assert code == 1
    assert "not inside a git repository" in err


def test_a_broken_report_json_names_the_file(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", str(repo))
    write(repo / ".agentdescent/report.json", '{"reward_before": 0.1,')
    code, _, err = invoke(repo, monkeypatch, "--json")
    assert code == 1
    assert "report.json is not valid JSON" in err


def _record_runs(store_path: Path) -> list[str]:
    """Two real kernel runs in the store: one finished, one cut short and resumable."""
    store = SqliteRunStore(store_path)
    rewards = iter([0.2, 0.5, 0.5, 0.9])

    def step(context: LoopContext) -> LoopObservation:
        return LoopObservation(reward=next(rewards), cost=0.01)

    try:
        kernel = LoopKernel(store, LoopConfig(tenant="t", workspace="w", max_generations=3))
        first = kernel.submit(key="first")
        kernel.run(first, "worker-1", step)
        second = kernel.submit(key="second")
        kernel.run(second, "worker-1", step, max_generations_this_call=1)
        return [first, second]
    finally:
        store.close()


def test_history_lists_runs_and_generations(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    user_git(tmp_path, "init", "--quiet", "--initial-branch=main", str(repo))
    first, second = _record_runs(repo / ".agentdescent/runs.sqlite3")

    code, out, _ = invoke(repo, monkeypatch, "--history", "--json")
    assert code == 0
    runs = json.loads(out)["runs"]
    assert [run["run_id"] for run in runs] == [second, first]  # newest first
    assert runs[1]["status"] == "completed"
    assert runs[1]["report"]["stopped_reason"] == "max_generations"
    assert [g["reward"] for g in runs[1]["report"]["generations"]] == [0.2, 0.5, 0.5]
    assert runs[0]["status"] == "running"
    assert len(runs[0]["report"]["generations"]) == 1

    code, out, _ = invoke(repo, monkeypatch, "--history")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith(f"run {first}"))
    assert "completed" in header
    assert "stopped rounds" in header  # report.json's names, not the kernel's
    assert "rounds 3" in header
    assert "calls 0" in header  # the kernel's cost is the proposer calls; these made none
    assert "cost" not in header  # no USD known
    rows = [line.split()[:3] for line in lines[lines.index(header) + 2:]][:3]
    assert rows == [["1", "accept", "0.200"], ["2", "accept", "0.500"],
                    ["3", "reject", "0.500"]]
    assert "baseline unknown" in lines[lines.index(header) + 2]

    code, out, _ = invoke(repo, monkeypatch, "--history", "--json", "--limit", "1")
    assert [run["run_id"] for run in json.loads(out)["runs"]] == [second]


def test_history_of_a_real_run_shows_its_baseline_calls_and_mode(
        evolved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stored = json.loads((evolved / ".agentdescent/report.json").read_text(encoding="utf-8"))

    code, out, _ = invoke(evolved, monkeypatch, "--history", "--json")
    assert code == 0
    run = json.loads(out)["runs"][0]
    assert run["run_id"] == stored["run"]["id"]
    assert run["reward_before"] == stored["reward_before"]
    assert run["rounds"] == stored["rounds"] == 1
    assert run["calls"] == stored["calls"]
    assert run["stop_reason"] == stored["stop_reason"]
    assert run["cost_usd"] is None  # no model: nothing priced
    assert run["dry_run"] is False

    code, out, _ = invoke(evolved, monkeypatch, "--history")
    assert code == 0
    lines = out.splitlines()
    assert "  live  rounds 1  " in lines[0]
    assert f"baseline {stored['reward_before']:.3f}" in lines[0]
    assert f"calls {stored['calls']}" in lines[0]
    assert f"stopped {stored['stop_reason']}" in lines[0]
    baseline = lines[2].split()
    assert baseline[:3] == ["0", "baseline", f"{stored['reward_before']:.3f}"]
    first = lines[3].split()
    assert first[0] == "1"
    assert first[3] == f"{stored['reward_after'] - stored['reward_before']:.3f}"
    assert int(first[4]) == stored["calls"]  # one round: all the calls are its own
