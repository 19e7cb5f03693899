"""Concurrent writers on one dev branch never lose an update (threads and processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import UserRepo

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.ledger import Ledger

COMMITS_PER_WRITER = 10
#: Generous, so the tests measure lost updates rather than the retry budget.
RETRIES = 40


def make_tree() -> FileTree:
    return FileTree(["skills"])


def check_no_update_lost(user: UserRepo, writers: int, base: str) -> None:
    total = writers * COMMITS_PER_WRITER
    with Ledger(user.path, make_tree()) as led:
        history = led.history()
        state = led.read_state("agentdescent/dev")
    assert [r.version for r in history] == list(range(total + 1))
    assert history[0].sha == base
    expected = {f"skills/w{w}/f{i}.md" for w in range(writers) for i in range(COMMITS_PER_WRITER)}
    assert expected <= set(state)
    for path in expected:
        assert state[path] == f"{path}\n"
    log = user.repo.git.log("--format=%H", f"{base}..agentdescent/dev").split()
    assert len(log) == total
    # Each commit adds exactly the one file its writer committed.
    for sha in log:
        names = user.repo.git.show("--name-status", "--format=", sha).split("\n")
        assert len(names) == 1
        assert names[0].startswith("A\tskills/w")


def write_files(led: Ledger, writer: int, start: threading.Barrier | None = None) -> list[int]:
    if start is not None:
        start.wait()
    attempts = []
    for i in range(COMMITS_PER_WRITER):
        path = f"skills/w{writer}/f{i}.md"
        result = led.commit(Diff({path: f"{path}\n"}, author=f"writer-{writer}"))
        assert result.committed
        attempts.append(result.attempts)
    return attempts


@pytest.mark.parametrize("shared", [False, True], ids=["own-ledgers", "shared-ledger"])
def test_two_threads_never_lose_an_update(user_repo: UserRepo, shared: bool):
    before = user_repo.snapshot()
    # Default retry budget: threads of one process take turns, so none may lose a race.
    ledgers = [Ledger(user_repo.path, make_tree())]
    ledgers.append(ledgers[0] if shared else Ledger(user_repo.path, make_tree()))
    ledgers[0].ensure_branches()
    start = threading.Barrier(2)
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def run(writer: int) -> None:
        try:
            results[writer] = write_files(ledgers[writer], writer, start)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for led in set(ledgers):
        led.close()
    assert not errors, errors
    assert sorted(results) == [0, 1]
    assert all(n == 1 for attempts in results.values() for n in attempts), results
    check_no_update_lost(user_repo, 2, user_repo.base)
    assert user_repo.snapshot() == before


WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    from agentdescent_core.artifacts.diff import Diff
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.ledger import Ledger

    repo, writer, go, commits, retries = sys.argv[1], int(sys.argv[2]), sys.argv[3], \\
        int(sys.argv[4]), int(sys.argv[5])
    with Ledger(repo, FileTree(["skills"]), max_cas_retries=retries) as led:
        while not os.path.exists(go):
            time.sleep(0.001)
        led.ensure_branches()
        attempts = []
        for i in range(commits):
            path = f"skills/w{writer}/f{i}.md"
            result = led.commit(Diff({path: path + "\\n"}, author=f"writer-{writer}"))
            assert result.committed
            attempts.append(result.attempts)
    print(json.dumps(attempts))
    """
)


def test_two_processes_never_lose_an_update(user_repo: UserRepo, tmp_path: Path):
    """Both processes also race to create the branches (one creates, one resumes)."""
    before = user_repo.snapshot()
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(user_repo.path), str(w), str(go),
             str(COMMITS_PER_WRITER), str(RETRIES)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for w in range(2)
    ]
    go.write_text("go\n", encoding="utf-8")
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert len(json.loads(out)) == COMMITS_PER_WRITER
    check_no_update_lost(user_repo, 2, user_repo.base)
    assert user_repo.snapshot() == before
