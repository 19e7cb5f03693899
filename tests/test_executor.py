"""Candidates evaluated on a real Dask cluster (``--evolve-executor dask://``).

Every test uses real Dask: an embedded ``LocalCluster`` of worker processes,
or a scheduler with a ``dask worker`` process started here.  Nothing of Dask,
git or the sandbox is replaced:

* the support-bot example reaches the same decisions and versions on the
  embedded cluster as on the local pool, for the same seed;
* a worker process killed while it runs a chunk: the chunk runs again on
  another worker, once, and the run finishes with the right rewards;
* an address where no scheduler listens: the run does not start, and the
  error names the address; a scheduler that dies during the run stops it with
  an error naming the address, and the same command resumes it;
* a worker that cannot run the chosen sandbox backend (or runs another
  Python): refused at connection time, naming the worker and what differs;
* a worker whose replies are altered after signing: every such reply is
  rejected by its MAC, nothing reaches the eval cache, and the run stops.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import user_git, write
from sandbox_support import child_pytest_args

pytest.importorskip("distributed")

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import RunStopped
from agentdescent_core.evaluation.cache import EvalCache
from agentdescent_core.evaluation.cluster_worker import environment, run_chunk
from agentdescent_core.evaluation.dask_executor import (
    DaskExecutor,
    environment_differences,
)
from agentdescent_core.evaluation.executor import (
    ExecutorError,
    ExecutorSpec,
    parse_executor,
)
from agentdescent_core.evaluation.journal import CHILD_ENV
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.remote import (
    ReplyRejected,
    job_key,
    open_reply,
)
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.local import LocalBackend

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "support-bot"

SLOW_TESTS = '''\
import time
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[1] / "skills" / "s" / "rules.md"


@pytest.mark.evolve
@pytest.mark.parametrize("n", range(4))
def test_slow(n):
    time.sleep(SLEEP)
    assert n % 2 == 0 or "odd" in RULES.read_text()
'''
TASKS = tuple(f"tests/test_slow.py::test_slow[{n}]" for n in range(4))


def slow_repo(path: Path, sleep: float, conftest: str = "") -> str:
    """A committed repository whose four tasks each sleep ``sleep`` s; half of them pass."""
    user_git(path.parent, "init", "--quiet", "--initial-branch=main", path.name)
    write(path / "pytest.ini", "[pytest]\ntestpaths = tests\n")
    if conftest:
        write(path / "conftest.py", conftest)
    write(path / "skills/s/rules.md", "even\n")
    write(path / "tests/test_slow.py", SLOW_TESTS.replace("SLEEP", repr(sleep)))
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "agent")
    return user_git(path, "rev-parse", "HEAD")


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def evolve(cwd: Path, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--evolve", "skills",
         "--evolve-sandbox", "local", *args],
        cwd=cwd, env=env or environ(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def finished(process: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def report_of(repo: Path) -> dict[str, Any]:
    data = json.loads((repo / ".agentdescent/report.json").read_text("utf-8"))
    assert isinstance(data, dict)
    return data


# ---------------------------------------------------------------- the example

def example_repo(path: Path) -> Path:
    shutil.copytree(EXAMPLE, path, ignore=shutil.ignore_patterns(
        "__pycache__", ".pytest_cache", ".agentdescent"))
    user_git(path, "init", "--quiet", "--initial-branch=main")
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "the support bot")
    return path


def versions(repo: Path) -> list[str]:
    """Every version on the dev branch as (tree, subject): what it holds, not when it was made."""
    log = user_git(repo, "log", "--format=%T %s", "agentdescent/dev")
    return log.splitlines()


@pytest.mark.slow
def test_the_support_bot_decides_the_same_on_an_embedded_cluster(tmp_path: Path) -> None:
    args = ("--evolve-repeats", "1", "--evolve-rounds", "1", "--evolve-seed", "7")
    here = example_repo(tmp_path / "local")
    there = example_repo(tmp_path / "dask")
    code, out = finished(evolve(here, *args))
    assert code == 0, out[-4000:]
    code, out_dask = finished(evolve(there, *args, "--evolve-executor", "dask://"))
    assert code == 0, out_dask[-4000:]
    assert "executor: dask embedded local cluster at tcp://127.0.0.1:" in out_dask
    local, remote = report_of(here), report_of(there)
    assert remote["executor"] == "dask://"
    assert local["executor"] == "local"
    assert remote["usage"]["remote_chunks"] > 0, "the chunks ran on the cluster"
    assert remote["usage"]["rejected_replies"] == 0
    for key in ("reward_before", "reward_after", "accepted", "rounds", "stop_reason",
                "tasks", "outcomes", "flips", "error"):
        assert remote[key] == local[key], key
    assert [h["messages"] for h in remote["history"]] == [h["messages"]
                                                         for h in local["history"]]
    assert local["accepted"] >= 1
    assert versions(there) == versions(here)


# ---------------------------------------------------------------- faults

def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a Dask worker starts the child from a thread)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(_children(child))
    return found


def _busy_worker(controller: int) -> int | None:
    """A worker process of the embedded cluster that is running a child pytest now."""
    for worker in _children(controller):
        if any("pytest_agentdescent.recorder" in _cmdline(p) for p in _descendants(worker)):
            return worker
    return None


@pytest.mark.slow
def test_a_worker_killed_mid_chunk_has_the_chunk_retried_and_the_run_finishes(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    slow_repo(repo, sleep=1.0)
    process = evolve(repo, "--evolve-rounds", "0", "--evolve-repeats", "1",
                     "--evolve-executor", "dask://")
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and process.poll() is None and time.monotonic() < deadline:
        victim = _busy_worker(process.pid)
        time.sleep(0.02)
    assert victim is not None, "no worker ever ran a chunk"
    time.sleep(0.2)  # well inside the chunk: its tests sleep 1 s each
    os.kill(victim, signal.SIGKILL)
    code, out = finished(process)
    assert code == 0, out[-4000:]
    report = report_of(repo)
    assert report["error"] is None
    assert report["reward_before"] == 0.5, "every task came back, with its real outcome"
    assert report["usage"]["remote_retries"] == 1, report["usage"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_scheduler_stops_the_run_naming_the_address(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    slow_repo(repo, sleep=0)
    address = f"127.0.0.1:{_free_port()}"
    code, out = finished(evolve(repo, "--evolve-rounds", "0",
                                "--evolve-executor", f"dask://{address}",
                                env=environ(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="1s")))
    assert code == 4, out[-3000:]
    assert f"cannot reach the Dask scheduler at tcp://{address}" in out
    assert "dask worker" in out, "the message says what to start"
    assert user_git(repo, "branch", "--list", "agentdescent/*") == "", "nothing was created"


KILLING_PROPOSER = """\
import os
import signal


def pytest_evolve_propose(context):
    victim = os.environ.get("KILL_BEFORE_PROPOSING")
    if victim:
        os.kill(int(victim), signal.SIGKILL)  # the scheduler dies in the middle of round 1
    return {"skills/s/rules.md": "even odd\\n"}
"""


@pytest.mark.slow
def test_a_lost_scheduler_stops_the_run_which_then_resumes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    slow_repo(repo, sleep=0, conftest=KILLING_PROPOSER)
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--no-dashboard"],
        env=environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "2",
         "--no-dashboard", "--host", "127.0.0.1"],
        env=environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        args = ("--evolve-rounds", "1", "--evolve-repeats", "1", "--evolve-workers", "1")
        code, out = finished(evolve(repo, *args, "--evolve-executor", f"dask://127.0.0.1:{port}",
                                    env=environ(KILL_BEFORE_PROPOSING=str(scheduler.pid),
                                                DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s")))
    finally:
        for process in (scheduler, worker):
            process.kill()
            process.wait(timeout=30)
    assert code == 1, out[-4000:]
    error = report_of(repo)["error"]
    assert error.startswith(f"ClusterLost: the evaluation cluster at {address} stopped"), error
    assert "run the same command to resume it" in error
    # The run stayed unfinished: the same arguments on the local pool pick it up.
    code, out = finished(evolve(repo, *args))
    assert code == 0, out[-4000:]
    assert "run       resuming run-" in out, out[-3000:]
    report = report_of(repo)
    assert report["error"] is None
    assert report["reward_after"] == 1.0


@pytest.fixture
def bare_scheduler() -> Iterator[str]:
    """A scheduler with no worker of its own, in this process."""
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=0, host="127.0.0.1", protocol="tcp://", dashboard_address=None,
                           processes=False)
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


def test_a_worker_that_cannot_run_the_backend_is_refused_naming_it(
        bare_scheduler: str, tmp_path: Path) -> None:
    tools = tmp_path / "git-only"  # git, and no bwrap
    tools.mkdir()
    git = shutil.which("git")
    assert git is not None
    (tools / "git").symlink_to(git)
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", bare_scheduler,
         "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"],
        env=environ(PATH=str(tools)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        executor = DaskExecutor.connect(parse_executor(f"dask://{bare_scheduler}"))
        try:
            with pytest.raises(ExecutorError) as caught:
                executor.check("bwrap")
            executor.check("local")  # the same worker can run what it has
        finally:
            executor.close()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    message = str(caught.value)
    assert "1 of 1 workers" in message
    assert "worker tcp://127.0.0.1:" in message
    assert "the bwrap sandbox backend is not usable there" in message
    assert "same lock file" in message
    assert "container image" in message


def test_a_worker_of_another_python_or_version_is_named() -> None:
    here = environment()
    there = {**here, "python": "3.99.0", "agentdescent": "0.0.1"}
    found = environment_differences(here, there, "local")
    assert f"Python 3.99.0 there, {here['python']} here" in found
    assert f"pytest-agentdescent 0.0.1 there, {here['agentdescent']} here" in found
    assert environment_differences(here, dict(here), "local") == []


# ---------------------------------------------------------------- signed replies

class RewritingExecutor(DaskExecutor):
    """A cluster whose workers turn every failed test into a pass after signing the reply."""

    def _chunk_function(self) -> Callable[..., tuple[str, str]]:
        return rewritten_chunk


def rewritten_chunk(*args: Any) -> tuple[str, str]:
    text, mac = run_chunk(*args)
    return text.replace('"outcome": "failed"', '"outcome": "passed"'), mac


@pytest.fixture
def cluster_verifier(tmp_path: Path) -> Iterator[tuple[SandboxedVerifier, DaskExecutor, Any]]:
    repo = tmp_path / "repo"
    commit = slow_repo(repo, sleep=0)
    tree = FileTree(["skills"])
    spec = ExecutorSpec("dask", workers=1)
    executor = RewritingExecutor.connect(spec)
    cache = EvalCache(tmp_path / "cache.sqlite3")
    verifier = SandboxedVerifier(
        repo, commit, TaskSplit(train=TASKS), tree=tree,
        frozen=FrozenSet(artifact_roots=tree.roots), backend=LocalBackend(), cache=cache,
        test_timeout=20.0, run_timeout=120.0, pytest_args=child_pytest_args(),
        executor=executor)
    try:
        yield verifier, executor, cache
    finally:
        verifier.close()
        executor.close()
        cache.close()


def test_a_reply_altered_after_signing_is_rejected_and_never_cached(
        cluster_verifier: tuple[SandboxedVerifier, DaskExecutor, Any]) -> None:
    verifier, executor, cache = cluster_verifier
    state = {"skills/s/rules.md": "even\n"}
    with pytest.raises(RunStopped) as caught:
        verifier.evaluate(state, TASKS, 1)
    assert caught.value.kind == "ReplyRejected"
    assert "MAC does not verify" in str(caught.value)
    assert executor.usage()["rejected_replies"] == 2, "the chunk was tried elsewhere once"
    assert verifier.evaluations == 0
    assert cache.get_many(*_cache_key(verifier, state), [(t, 0) for t in TASKS]) == {}

    # The same worker function, unaltered: its reply opens under its job's key only.
    setup, bundle = verifier._remote_setup()
    shipped = executor._bundle(bundle)
    plan = {task: (0, 1) for task in TASKS}
    key = job_key(executor._run_key, "job-1")
    sealed = executor._client.submit(run_chunk, setup, shipped, "job-1", key, state, plan,
                                     60.0, pure=False).result()
    reply = open_reply(sealed, key=key, job_id="job-1", frozen_hash=setup.frozen_hash,
                       plan=plan)
    assert sorted(r.outcome for r in reply.outcome.records) == ["failed", "failed",
                                                                  "passed", "passed"]
    with pytest.raises(ReplyRejected, match="MAC does not verify"):
        open_reply(sealed, key=job_key(executor._run_key, "job-2"), job_id="job-2",
                   frozen_hash=setup.frozen_hash, plan=plan)  # replayed for another job
    forged = (sealed[0], job_key(os.urandom(32), "job-1").hex())
    with pytest.raises(ReplyRejected, match="MAC does not verify"):
        open_reply(forged, key=key, job_id="job-1", frozen_hash=setup.frozen_hash, plan=plan)
    fewer = {TASKS[0]: (0, 1)}
    with pytest.raises(ReplyRejected, match="did not ask for"):
        open_reply(sealed, key=key, job_id="job-1", frozen_hash=setup.frozen_hash, plan=fewer)


def _cache_key(verifier: SandboxedVerifier, state: dict[str, str]) -> tuple[str, str]:
    from agentdescent_core.artifacts.filetree import state_hash

    context = verifier.cache_context
    assert context is not None
    return state_hash(state), context


def test_executor_specs_parse_or_say_the_forms() -> None:
    assert parse_executor("local").is_local
    assert parse_executor("dask://").embedded
    spec = parse_executor("dask://scheduler.example:8786")
    assert (spec.engine, spec.address, spec.embedded) == ("dask", "tcp://scheduler.example:8786",
                                                          False)
    assert parse_executor("dask://tls://scheduler.example:8786").address == "tls://scheduler.example:8786"
    for bad in ("ray://", "dask", "threads"):
        with pytest.raises(ValueError, match="'local' or 'dask://'"):
            parse_executor(bad)
