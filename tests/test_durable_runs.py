"""``pytest --evolve`` as a durable run: SIGKILL at several points, resume, lease, kill switch.

The agent repository is the one of test_session_runs.  Its conftest (the
user's code, running in the controller process) kills that process with
SIGKILL at a chosen point the first time it gets there — a marker file makes
the second run go through — so the crash is a real one: no cleanup handler,
no finally block, locks and leases left behind.  The next ``pytest --evolve``
with the same arguments must resume the same run, and the ledger must hold
every accepted version exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import user_git, write
from test_session_runs import (
    PROPOSER,
    RULES,
    WORDS,
    evolve,
    explain,
    ledger_refs,
    make_agent_repo,
    report_of,
)

from agentdescent_core.evaluation.journal import CHILD_ENV

pytestmark = pytest.mark.slow

#: Appended to the proposer conftest: SIGKILL this process once, where AD_KILL_AT says.
KILLER = '''

import signal as _signal
from pathlib import Path as _Path


def _kill_once(point):
    mark = _Path(os.environ["AD_KILL_MARK"])
    if os.environ.get("AD_KILL_AT") == point and not mark.exists():
        mark.write_text(point)
        os.kill(os.getpid(), _signal.SIGKILL)


_learn = pytest_evolve_propose


def pytest_evolve_propose(context):
    if context.round == 2:
        _kill_once("propose-round-2")
    return _learn(context)


def pytest_evolve_round(info):
    if info.accepted:
        _kill_once("after-commit")


def pytest_configure(config):
    # Promotion moves the stable ref through the ledger's own git plumbing; kill the
    # process right after git moved it, before the ledger returns.
    from agentdescent_core.ledger import plumbing

    real = plumbing.GitRepo.update_refs

    def update_refs(self, updates, reason):
        real(self, updates, reason)
        if reason.startswith("agentdescent: promote"):
            _kill_once("promotion")

    plumbing.GitRepo.update_refs = update_refs
'''


def store_rows(repo: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(repo / ".agentdescent/runs.sqlite3") as db:
        return list(db.execute(sql))


def dev_versions(repo: Path) -> list[dict[str, str]]:
    """Trailers of each dev commit since the base, oldest first."""
    out = user_git(repo, "log", "--reverse", "--format=%H%x00%(trailers:only,unfold)%x01",
                   "main..agentdescent/dev")
    versions = []
    for chunk in out.split("\x01"):
        if not chunk.strip():
            continue
        sha, _, trailers = chunk.strip().partition("\x00")
        fields = dict(line.split(": ", 1) for line in trailers.splitlines() if ": " in line)
        versions.append({"sha": sha, **fields})
    return versions


def assert_ledger_consistent(repo: Path) -> None:
    versions = dev_versions(repo)
    numbers = [int(v["Agentdescent-Version"]) for v in versions]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    generations = [(v.get("Agentdescent-Run"), v.get("Agentdescent-Generation"))
                   for v in versions]
    diffs = [v["Agentdescent-Diff"] for v in versions]
    assert len(set(diffs)) == len(diffs), "a candidate was committed twice"
    assert all(run for run, _ in generations), "a commit lacks its run trailer"
    rules = user_git(repo, "show", f"agentdescent/dev:{RULES}")
    for word in WORDS:
        assert rules.count(f"- {word}:") <= 1, rules


@pytest.mark.parametrize("point", ["propose-round-2", "after-commit", "promotion"])
def test_a_run_killed_with_sigkill_resumes_where_it_stopped(tmp_path: Path, point: str) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=PROPOSER + KILLER)
    env = {"AD_KILL_AT": point, "AD_KILL_MARK": str(tmp_path / "killed")}

    first = evolve(repo, "--evolve-workers", "1", env=env)

    assert first.returncode == -signal.SIGKILL, explain(first)
    assert (tmp_path / "killed").read_text() == point
    runs = store_rows(repo, "SELECT run_id, status FROM runs")
    # promotion comes after the kernel recorded the last generation and completed
    expected = {"completed"} if point == "promotion" else {"running"}
    assert len(runs) == 1
    assert runs[0][1] in expected, runs
    killed_run = runs[0][0]
    recorded = store_rows(repo, f"SELECT key FROM events WHERE run_id = {killed_run!r}")

    second = evolve(repo, "--evolve-workers", "1", env=env)

    assert second.returncode == 0, explain(second)
    assert "died without finishing; its lease was taken over" in second.stdout
    report = report_of(repo)
    assert report["error"] is None
    assert report["reward_after"] == 1.0
    assert_ledger_consistent(repo)
    refs = ledger_refs(repo)
    assert refs["refs/heads/agentdescent/stable"] == refs["refs/heads/agentdescent/dev"]
    assert not list((repo / ".git/refs/heads/agentdescent").glob("*.lock"))
    keys = [k for (k,) in store_rows(
        repo, f"SELECT key FROM events WHERE run_id = {killed_run!r}")]
    assert len(keys) == len(set(keys)), "an event was recorded twice"
    if point == "promotion":
        # every generation was recorded before the end: the next run is a new one
        # that finds nothing to do and promotes
        assert report["run"]["id"] != killed_run
    else:
        assert report["run"]["id"] == killed_run, "the same arguments must resume the run"
        assert report["run"]["replayed"] == len([k for (k,) in recorded
                                                 if k.startswith("generation:")])
        assert f"resuming {killed_run}" in second.stdout
    if point == "after-commit":
        # round 1 (kernel generation 0) committed, then died before its event: the
        # commit was recognised by its trailers, not made again
        firsts = [v for v in dev_versions(repo) if v.get("Agentdescent-Generation") == "0"]
        assert len(firsts) == 1
        assert firsts[0]["Agentdescent-Run"] == killed_run
        payloads = [json.loads(p) for (p,) in store_rows(
            repo, f"SELECT payload FROM events WHERE run_id = {killed_run!r} "
                  "AND key = 'generation:0'")]
        assert payloads
        assert "recovered" in json.dumps(payloads[0])


SLOW_PROPOSER = PROPOSER + '''

import time as _time
from pathlib import Path as _Path

_learn = pytest_evolve_propose


def pytest_evolve_propose(context):
    started = _Path(os.environ["AD_STARTED"])
    started.write_text(str(os.getpid()))
    release = _Path(os.environ["AD_RELEASE"])
    while not release.exists():
        _time.sleep(0.05)
    return _learn(context)
'''


def test_a_second_run_on_the_same_repository_is_refused_naming_the_holder(
        tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=SLOW_PROPOSER)
    started, release = tmp_path / "started", tmp_path / "release"
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}
    env.update(AD_STARTED=str(started), AD_RELEASE=str(release), PYTHONDONTWRITEBYTECODE="1")
    holder = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--evolve", "skills",
         "--evolve-sandbox", "local", "--evolve-workers", "1", "--evolve-rounds", "3"],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert holder.poll() is None, holder.communicate()[0]
            assert time.monotonic() < deadline, "the first run never reached its proposer"
            time.sleep(0.1)

        second = evolve(repo, "--evolve-dry-run")

        assert second.returncode == 4, explain(second)
        message = second.stderr + second.stdout
        assert "another agentdescent run holds this repository" in message
        assert f":{holder.pid}@" in message
        assert "lease expires at" in message
    finally:
        release.write_text("go")
        output = holder.communicate(timeout=300)[0]
    assert holder.returncode == 0, output
    assert report_of(repo)["reward_after"] == 1.0


STOPPING_PROPOSER = PROPOSER + '''

from pathlib import Path as _Path

_learn = pytest_evolve_propose


def pytest_evolve_propose(context):
    # the operator's kill switch, engaged during the first round
    _Path(".agentdescent/STOP").write_text("operator: stop for the release\\n")
    return _learn(context)
'''


def test_the_stop_file_ends_the_run_cleanly_at_the_next_round(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=STOPPING_PROPOSER)

    result = evolve(repo, "--evolve-workers", "1")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "kill-switch"
    assert report["rounds"] == 1
    assert report["error"] is None
    assert "operator: stop for the release" in result.stdout
    assert "remove" in result.stdout
    assert "STOP" in result.stdout
    refs = ledger_refs(repo)
    # a clean stop promotes what was accepted
    assert refs["refs/heads/agentdescent/stable"] == refs["refs/heads/agentdescent/dev"]
    status = store_rows(repo, "SELECT status FROM runs")
    assert status
    assert status[0][0] in ("completed", "cancelled")

    again = evolve(repo, "--evolve-workers", "1")
    assert again.returncode == 0, explain(again)
    assert report_of(repo)["rounds"] == 0, "the switch stays engaged until the file is removed"


# ---------------------------------------------------------------- scheduled sessions

FETCH = ("+refs/heads/agentdescent/*:refs/heads/agentdescent/*",
         "+refs/agentdescent/*:refs/agentdescent/*")
PUSH = ("refs/heads/agentdescent/dev", "refs/heads/agentdescent/stable",
        "refs/agentdescent/sessions")


def scheduled_session(remote: Path, workdir: Path, *extra: str) -> dict[str, Any]:
    """One scheduled job: a fresh clone, fetch our refs, evolve, push them back."""
    clone = workdir
    subprocess.run(["git", "clone", "--quiet", str(remote), str(clone)], check=True)
    user_git(clone, "fetch", "--quiet", "origin", *FETCH)
    result = evolve(clone, "--evolve-workers", "1", "-o", "evolve_session_patience=1", *extra)
    assert result.returncode == 0, explain(result)
    user_git(clone, "push", "--quiet", "--force", "origin", *PUSH)
    report = report_of(clone)
    report["stdout"] = result.stdout
    return report


def test_scheduled_sessions_skip_when_stagnant_and_evolve_on_new_tests_or_degradation(
        tmp_path: Path) -> None:
    source = tmp_path / "source"
    make_agent_repo(source)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(source), str(remote)], check=True)

    first = scheduled_session(remote, tmp_path / "job1")
    assert first["session"]["code"] == "first-session"
    assert first["reward_after"] == 1.0
    assert first["accepted"] >= 1

    second = scheduled_session(remote, tmp_path / "job2")
    assert second["session"]["code"] == "improving"
    assert second["reward_before"] == 1.0
    assert second["accepted"] == 0

    third = scheduled_session(remote, tmp_path / "job3")
    assert third["session"]["evolve"] is False
    assert third["session"]["code"] == "stagnant"
    assert third["calls"] == 0
    assert third["rounds"] == 0
    assert "session   skip (stagnant)" in str(third["stdout"])
    summary = (tmp_path / "job3/.agentdescent/report.md").read_text()
    assert "This scheduled session skipped evolution (baseline only): **stagnant**" in summary

    # the world moves under the same test ids (every case now fails): the reward of the
    # version in use drops from 1.0, 1.0, 1.0 to 0.0, a third below, and it evolves again
    update = tmp_path / "update"
    subprocess.run(["git", "clone", "--quiet", str(remote), str(update)], check=True)
    tests = update / "tests/test_bot.py"
    text = tests.read_text()
    passing = 'assert f"- {word}" in RULES.read_text()'
    assert passing in text
    write(tests, text.replace(passing, passing + " and case < 0"))
    user_git(update, "commit", "--quiet", "-am", "the world moved")
    user_git(update, "push", "--quiet", "origin", "main")
    fourth = scheduled_session(remote, tmp_path / "job4")
    assert fourth["session"]["evolve"] is True
    assert fourth["session"]["code"] == "degraded"
    assert fourth["reward_before"] == 0.0
    assert "33% below the best 1.000" in fourth["session"]["reason"]

    # a new marked test arrives on main (and the world is mended): it evolves for it
    write(tests, text.replace(repr(WORDS), repr((*WORDS, "returns"))))
    user_git(update, "commit", "--quiet", "-am", "a new case")
    user_git(update, "push", "--quiet", "origin", "main")
    fifth = scheduled_session(remote, tmp_path / "job5")
    assert fifth["session"]["code"] == "tests-added"
    assert fifth["reward_after"] == 1.0

    history = user_git(tmp_path / "job5", "show", "refs/agentdescent/sessions:sessions.json")
    sessions = json.loads(history)["sessions"]
    assert [s["decision"] for s in sessions] == ["evolve", "evolve", "skip", "evolve", "evolve"]
    assert [s["reason"].startswith("the mean") for s in sessions] == [False] * 3 + [True, False]


def test_zero_rounds_measures_the_baseline_and_records_a_finished_run(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = evolve(repo, "--evolve-rounds", "0")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["rounds"] == 0
    assert report["calls"] == 0
    assert report["stop_reason"] == "rounds"
    assert report["run"]["status"] == "completed"
    assert store_rows(repo, "SELECT status FROM runs") == [("completed",)]
    assert store_rows(repo, "SELECT COUNT(*) FROM events") == [(0,)]


def test_ctrl_c_frees_the_repository_and_the_next_run_resumes(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=SLOW_PROPOSER)
    started, release = tmp_path / "started", tmp_path / "release"
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}
    env.update(AD_STARTED=str(started), AD_RELEASE=str(release), PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--evolve", "skills",
               "--evolve-sandbox", "local", "--evolve-workers", "1", "--evolve-rounds", "3"]
    first = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not started.exists():
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "the run never reached its proposer"
        time.sleep(0.1)
    first.send_signal(signal.SIGINT)
    output = first.communicate(timeout=120)[0]

    assert first.returncode == pytest.ExitCode.INTERRUPTED, output
    runs = store_rows(repo, "SELECT run_id, status FROM runs")
    assert [status for _, status in runs] == ["running"]
    assert store_rows(repo, "SELECT name FROM leases") == [], "Ctrl-C must free the leases"

    release.write_text("go")
    second = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True,
                            timeout=300, check=False)

    assert second.returncode == 0, explain(second)
    assert f"resuming {runs[0][0]}" in second.stdout
    assert "taken over" not in second.stdout  # nobody died: the lease was released
    assert report_of(repo)["reward_after"] == 1.0
    assert_ledger_consistent(repo)
