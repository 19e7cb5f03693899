"""``local`` is not a security boundary, and behaves like it knows that.

Real processes, real git repositories.  Under ``local`` a candidate's script
runs as the user, so nothing here is *blocked*; each attack must be detected,
undone, and (where it touched the user's ``.git`` or the state directory) end
the run with a message naming what changed:

* ``auto`` never picks ``local`` while bwrap or docker works, and the header
  says plainly that ``local`` is no boundary;
* processes a run leaves behind — 300 double-forked sleepers, a ``setsid()``
  daemon that later rewrites skill files — are all killed after the run and
  counted (``RunResult.reaped``, a :class:`StrayProcessesWarning`);
* refs, config, hooks, ``info/attributes``, a planted ``.pyc`` and the eval
  cache: restored byte for byte, the candidate ``tamper``, the run stopped;
* no git command of the controller runs a filter or fsmonitor the repository
  configures;
* a secret readable in ``/proc`` (this process or an ancestor) refuses ``local``.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import snapshot, user_git, write
from sandbox_support import ISOLATING_BACKENDS, child_pytest_args, require_backend
from test_hostile_candidates import (
    ACT,
    CLEAN_ACT,
    GUARD,
    SKILL,
    TASK,
    attack,
    clean_state,
    make_agent_repo,
)

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.cache import EvalCache
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger import Ledger
from agentdescent_core.sandbox.exposure import exposed_secrets
from agentdescent_core.sandbox.guard import RepoGuard, TamperError
from agentdescent_core.sandbox.local import SandboxSetupError, StrayProcessesWarning
from agentdescent_core.sandbox.reaper import start_ticks, sweep
from agentdescent_core.sandbox.select import AUTO_ORDER, describe_backend, get_backend
from agentdescent_core.sandbox.spec import Limits, RunSpec
from agentdescent_core.sandbox.workspace import Workspace, dirty_paths

SECRET = "ghp_" + "Q" * 36


def _verifier(repo: Path, commit: str, cache_dir: Path, **limits: int) -> SandboxedVerifier:
    tree = FileTree(["skills"])
    return SandboxedVerifier(
        repo, commit, TaskSplit(train=(TASK,), guards=(GUARD,)),
        tree=tree, frozen=FrozenSet(artifact_roots=tree.roots),
        backend=require_backend("local"), cache=EvalCache(cache_dir / "eval-cache.sqlite3"),
        limits=Limits(memory_mb=1024, cpu_seconds=60, **({"max_processes": 64} | limits)),
        test_timeout=20.0, run_timeout=120.0, pytest_args=child_pytest_args(),
    )


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Path, str, SandboxedVerifier]]:
    repo = tmp_path / "repo"
    commit = make_agent_repo(repo)
    state = repo / ".agentdescent"
    state.mkdir()
    made = _verifier(repo, commit, state)
    yield repo, commit, made
    made.close()
    if made.cache is not None:
        made.cache.close()


def _user_files(repo: Path) -> dict[str, str]:
    """The repository as the user sees it, minus the run's own state directory."""
    return {k: v for k, v in snapshot(repo).items() if not k.startswith(".agentdescent")}


def _candidate(script: str) -> dict[str, str]:
    return {**clean_state(), ACT: script + f"# {uuid.uuid4().hex}\n"}


def _clean_scores_one(verifier: SandboxedVerifier) -> None:
    again = verifier.evaluate({**clean_state(), ACT: CLEAN_ACT + f"# {uuid.uuid4().hex}\n"},
                              [TASK, GUARD], 1)
    assert again.rewards == {TASK: (1.0,), GUARD: (1.0,)}


def _fresh_run_scores_one(repo: Path, commit: str, tmp_path: Path) -> None:
    """The user's next run on the restored repository works as before."""
    verifier = _verifier(repo, commit, tmp_path / f"next-{uuid.uuid4().hex[:6]}")
    try:
        _clean_scores_one(verifier)
    finally:
        verifier.close()
        assert verifier.cache is not None
        verifier.cache.close()


# ---------------------------------------------------------------- 1. choosing it


def test_auto_never_picks_local_while_an_isolating_backend_works() -> None:
    working = [name for name in AUTO_ORDER if name in ISOLATING_BACKENDS
               and get_backend(name).unavailable_reason() is None]
    if not working:
        require_backend("bwrap")  # fails under CI, skips elsewhere
    assert get_backend("auto").name == working[0]
    line = describe_backend(get_backend("local"), network="default")
    assert line.startswith("sandbox: local (NOT a security boundary")


# ---------------------------------------------------------------- 2. leftover processes


def _alive_with(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _detaching_script(token: str, marker: Path, sleepers: int) -> str:
    """Double-forked sleepers (cwd in the workspace) and a daemon that hides its cwd and fds.

    The daemon waits for the run's pytest to end, then rewrites the skill file
    the next candidate runs and leaves ``marker`` as proof that it outlived the run.
    """
    return attack(f"""
devnull = os.open(os.devnull, os.O_RDWR)
pytest_pid = os.getppid()  # the child pytest: the daemon strikes once it is gone
for _ in range({sleepers}):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv("/bin/sleep", ["sleep", "{token}"])
        os._exit(0)
    os.wait()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.chdir("/")
        os.closerange(0, 1024)
        while os.path.exists(f"/proc/{{pytest_pid}}"):
            time.sleep(0.02)
        time.sleep(1)  # the next candidate is being set up
        (ROOT / "skills/greeter/act.py").write_text("print('owned')\\n")
        pathlib.Path({str(marker)!r}).write_text("the daemon outlived its run")
        os._exit(0)
    os._exit(0)
os.wait()
""")


def test_detached_processes_never_outlive_the_run(
        agent: tuple[Path, str, SandboxedVerifier], tmp_path: Path) -> None:
    repo, commit, _ = agent
    verifier = _verifier(repo, commit, tmp_path / "wide", max_processes=1024)
    token = f"700.{uuid.uuid4().int % 10**9:09d}"  # a unique, valid sleep duration
    marker = tmp_path / "daemon-marker"
    before = _user_files(repo)
    try:
        with pytest.warns(StrayProcessesWarning, match=r"left \d+ process") as caught:
            samples = verifier.evaluate(_candidate(_detaching_script(token, marker, 300)),
                                        [TASK, GUARD], 1)
        assert samples.rewards[TASK] == (1.0,)  # the attack itself answered right
        counts = [int(str(w.message).split(" left ")[1].split()[0]) for w in caught]
        assert max(counts) >= 301, counts
        deadline = time.monotonic() + 2
        while _alive_with(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive_with(token) == []
        time.sleep(2)  # past the daemon's wake-up
        assert not marker.exists()
        _clean_scores_one(verifier)  # the next candidate's skill file was not rewritten
        assert _user_files(repo) == before
    finally:
        verifier.close()


def test_the_sweep_finds_a_process_by_cwd_by_fd_and_by_environment(tmp_path: Path) -> None:
    workspace, scratch = tmp_path / "ws", tmp_path / "scratch"
    workspace.mkdir()
    scratch.mkdir()
    (workspace / "held").write_text("x")
    token = f"701.{uuid.uuid4().int % 10**9:09d}"
    outside = tmp_path / "outside"
    outside.mkdir()
    sleep = ["/bin/sleep", token]
    by_cwd = subprocess.Popen(sleep, cwd=workspace, start_new_session=True)
    with open(workspace / "held", "rb") as handle:
        by_fd = subprocess.Popen(sleep, cwd=outside, stdin=handle, start_new_session=True,
                                 env={"PATH": "/usr/bin:/bin"})
    by_env = subprocess.Popen(sleep, cwd=outside, start_new_session=True,
                              env={"HOME": str(scratch / "home")})
    unrelated = subprocess.Popen(sleep, cwd=outside, start_new_session=True, env={})
    try:
        assert sweep([workspace, scratch], since=start_ticks(by_cwd.pid)) == 3
        for proc in (by_cwd, by_fd, by_env):
            assert proc.wait(timeout=5) == -9
        assert unrelated.poll() is None
    finally:
        for proc in (by_cwd, by_fd, by_env, unrelated):
            proc.kill()
            proc.wait()


def test_reaped_counts_on_the_run_result(tmp_path: Path) -> None:
    workspace, scratch = tmp_path / "ws", tmp_path / "scratch"
    workspace.mkdir()
    scratch.mkdir()
    code = textwrap.dedent("""
        import subprocess
        for _ in range(5):
            subprocess.Popen(["/bin/sleep", "30"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    """)
    spec = RunSpec(argv=[sys.executable, "-c", code], workspace=workspace, scratch=scratch,
                   env={"PATH": os.environ["PATH"], "HOME": str(scratch)}, timeout=30)
    with pytest.warns(StrayProcessesWarning):
        result = require_backend("local").run(spec)
    assert result.returncode == 0, result.stderr
    assert result.reaped == 5


# ---------------------------------------------------------------- 3. the user's .git, state dir


def _second_commit(repo: Path) -> str:
    write(repo / "NOTES.md", "notes\n")
    user_git(repo, "add", "NOTES.md")
    user_git(repo, "commit", "--quiet", "-m", "notes")
    return user_git(repo, "rev-parse", "HEAD")


def _expect_tamper(verifier: SandboxedVerifier, state: dict[str, str], *names: str) -> str:
    with pytest.raises(TamperError) as raised:
        verifier.evaluate(state, [TASK, GUARD], 1)
    message = str(raised.value)
    for name in names:
        assert name in message, message
    assert raised.value.category == "tamper"
    with pytest.raises(TamperError):  # the run stays stopped: nothing more is evaluated
        verifier.evaluate(clean_state(), [TASK], 1)
    return message


@pytest.mark.parametrize("where", ["refs/heads/main", "config", "hooks", "info/attributes",
                                   "packed-refs", "HEAD"])
def test_a_change_to_the_users_git_is_restored_and_stops_the_run(
        where: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = make_agent_repo(repo)
    commit = _second_commit(repo)
    user_git(repo, "tag", "v1", first)
    user_git(repo, "pack-refs", "--all")
    git = repo / ".git"
    marker = tmp_path / "filter-ran"
    script = {
        "refs/heads/main": f'(pathlib.Path({str(git)!r}) / "refs/heads/main").write_text('
                           f'"{first}\\n")',
        "config": f'with open(pathlib.Path({str(git)!r}) / "config", "a") as f:\n'
                  f'    f.write("[filter \\"evil\\"]\\n\\tsmudge = touch {marker}; cat\\n'
                  f'[core]\\n\\tfsmonitor = touch {marker}\\n")',
        "hooks": f'h = pathlib.Path({str(git)!r}) / "hooks/pre-commit"\n'
                 f'h.write_text("#!/bin/sh\\ntouch {marker}\\n")\nh.chmod(0o755)',
        "info/attributes": f'(pathlib.Path({str(git)!r}) / "info/attributes").write_text('
                           '"* filter=evil\\n")',
        "packed-refs": f'p = pathlib.Path({str(git)!r}) / "packed-refs"\n'
                       f'p.write_text(p.read_text().replace("{first}", "{commit}"))',
        "HEAD": f'(pathlib.Path({str(git)!r}) / "HEAD").write_text("ref: refs/heads/evil\\n")',
    }[where]
    before = _user_files(repo)
    verifier = _verifier(repo, commit, repo / ".agentdescent")
    try:
        message = _expect_tamper(verifier, _candidate(attack(script)), f".git/{where}")
        assert "restored" in message
    finally:
        verifier.close()
    assert _user_files(repo) == before
    assert not marker.exists()
    _fresh_run_scores_one(repo, commit, tmp_path)


def test_the_ledgers_own_commits_during_runs_are_not_tamper_but_a_moved_dev_is(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_agent_repo(repo)
    tree = FileTree(["skills"])
    with Ledger(repo, tree) as ledger:
        ledger.ensure_branches()
        guard = RepoGuard(repo, None)
        try:
            ledger.commit(Diff({SKILL: "# Greeter\n\nSay hello twice.\n"}))
            ledger.promote()
            assert guard.check() == []
            trusted = ledger.head("dev")

            # someone else moves dev; the next check names it and puts it back
            dev = repo / ".git/refs/heads/agentdescent/dev"
            forged = user_git(repo, "rev-parse", "main")
            dev.write_text(forged + "\n")
            [change] = guard.check()
            assert ".git/refs/heads/agentdescent/dev" in change
            assert forged in change
            assert dev.read_text().strip() == trusted

            # moved, and the ledger then committed on top: the broken chain is still seen
            dev.write_text(forged + "\n")
            ledger.commit(Diff({SKILL: "# Greeter\n\nSay hello thrice.\n"}))
            changes = guard.check()
            assert any("by someone other than the ledger" in c for c in changes), changes
            assert dev.read_text().strip() == trusted
        finally:
            guard.close()


def _forged_pyc(source: Path) -> tuple[Path, bytes]:
    st = source.stat()
    header = (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
              + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
              + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
    code = compile("print('pwned')\n", str(source), "exec")
    return Path(importlib.util.cache_from_source(str(source))), header + marshal.dumps(code)


def test_a_planted_pyc_in_the_users_repository_is_removed_and_stops_the_run(
        agent: tuple[Path, str, SandboxedVerifier], tmp_path: Path) -> None:
    repo, commit, verifier = agent
    target, data = _forged_pyc(repo / "skills/greeter/act.py")
    script = (f"p = pathlib.Path({str(target)!r})\np.parent.mkdir(exist_ok=True)\n"
              f"p.write_bytes({data!r})")
    before = _user_files(repo)
    _expect_tamper(verifier, _candidate(attack(script)), "skills/greeter/__pycache__/",
                   "not its source compiled")
    assert not target.exists()
    assert _user_files(repo) == before
    _fresh_run_scores_one(repo, commit, tmp_path)


def test_an_honest_pyc_is_removed_without_stopping_the_run(
        agent: tuple[Path, str, SandboxedVerifier]) -> None:
    repo, _commit, verifier = agent
    source = repo / "skills/greeter/act.py"
    target = Path(importlib.util.cache_from_source(str(source)))
    script = f"import py_compile\npy_compile.compile({str(source)!r}, doraise=True)"
    samples = verifier.evaluate(_candidate(attack(script)), [TASK, GUARD], 1)
    assert samples.rewards == {TASK: (1.0,), GUARD: (1.0,)}
    assert not target.exists()


def _rows(path: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)  # a reader: not a write the guard may mistake for one
    try:
        return sorted(db.execute("SELECT * FROM records").fetchall())
    finally:
        db.close()


def test_rewritten_eval_cache_rows_are_restored_and_stop_the_run(
        agent: tuple[Path, str, SandboxedVerifier], tmp_path: Path) -> None:
    repo, commit, verifier = agent
    _clean_scores_one(verifier)
    cache = repo / ".agentdescent/eval-cache.sqlite3"
    rows = _rows(cache)
    assert rows
    script = (f"import sqlite3\ndb = sqlite3.connect({str(cache)!r})\n"
              "db.execute(\"UPDATE records SET record = replace(record, 'passed', 'failed')\")\n"
              "db.execute(\"CREATE TRIGGER forge AFTER INSERT ON records BEGIN "
              "UPDATE records SET created = 0; END\")\n"
              "db.commit()\ndb.close()")
    _expect_tamper(verifier, _candidate(attack(script)), ".agentdescent/eval-cache.sqlite3")
    assert _rows(cache) == rows
    db = sqlite3.connect(cache)
    try:
        assert db.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall() == []
        kinds = [row[0] for row in db.execute("SELECT kind FROM verdicts")]
    finally:
        db.close()
    assert kinds == ["tamper"]  # the controller's own verdict, written after the restore
    _fresh_run_scores_one(repo, commit, tmp_path)


# ---------------------------------------------------------------- 4. no user filter runs


def test_no_filter_fsmonitor_or_hook_of_the_repository_runs_in_the_controller(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    commit = make_agent_repo(repo)
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    write(script, f"#!/bin/sh\necho \"$0 $*\" >> {marker}\ncat\n", executable=True)
    with open(repo / ".git/config", "a", encoding="utf-8") as config:
        config.write(f'[filter "evil"]\n\tsmudge = {script} smudge\n\tclean = {script} clean\n'
                     f'\trequired = true\n[core]\n\tfsmonitor = {script}\n')
    write(repo / ".git/info/attributes", "* filter=evil\n")
    write(repo / ".git/hooks/reference-transaction", f"#!/bin/sh\n{script} hook\n",
          executable=True)
    time.sleep(0.01)
    (repo / SKILL).write_text((repo / SKILL).read_text())  # stat-dirty: status must clean it

    tree = FileTree(["skills"])
    workspace = Workspace.create(repo, commit, tree=tree,
                                 frozen=FrozenSet(artifact_roots=tree.roots))
    try:
        workspace.reset({**clean_state(), ACT: "print('hi')\n"})
        workspace.reset(clean_state())
        assert (workspace.root / "tests/test_guard.py").read_bytes() == \
            (repo / "tests/test_guard.py").read_bytes()
    finally:
        workspace.close()
    assert dirty_paths(repo) == []
    with Ledger(repo, tree) as ledger:
        ledger.ensure_branches()
        ledger.commit(Diff({SKILL: "# Greeter\n\nSay hello.\nBriefly.\n"}))
        ledger.promote()
    assert not marker.exists(), marker.read_text()
    # the plant is real: the user's own git runs it
    user_git(repo, "status", "--porcelain")
    assert marker.exists()


# ---------------------------------------------------------------- 5. secrets in /proc


def test_local_is_refused_while_a_secret_is_in_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    commit = make_agent_repo(repo)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    with pytest.raises(SandboxSetupError) as raised:
        _verifier(repo, commit, tmp_path)
    message = str(raised.value)
    assert "GITHUB_TOKEN" in message
    assert SECRET not in message
    assert "--evolve-sandbox bwrap or docker" in message
    assert "this process's environment" in message


_PROBE = ("import json, os\n"
          "os.environ.pop('ACTIONS_RUNTIME_TOKEN', None)\n"
          "from agentdescent_core.sandbox.exposure import exposed_secrets\n"
          "print(json.dumps([[e.name, e.where] for e in exposed_secrets()]))\n")


def test_a_secret_in_an_ancestors_or_the_initial_environment_is_found(tmp_path: Path) -> None:
    import json

    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "ACTIONS_RUNTIME_TOKEN": "secret-value"}
    # the variable lives only in the shell above the probe
    done = subprocess.run(["sh", "-c", f"env -u ACTIONS_RUNTIME_TOKEN {sys.executable} -c "
                                       f"\"$PROBE\""], env={**env, "PROBE": _PROBE},
                          capture_output=True, text=True, check=True)
    [[name, where]] = json.loads(done.stdout)
    assert name == "ACTIONS_RUNTIME_TOKEN"
    assert "ancestor process" in where
    assert "(sh)" in where
    # removed from os.environ, it is still in /proc/self/environ
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, check=True)
    [[name, where]] = json.loads(done.stdout)
    assert "initial environment" in where
    assert "secret-value" not in done.stdout
    assert all(e.name != "GH_TOKEN" for e in exposed_secrets({"GH_TOKEN": ""}))  # empty


def test_pytest_evolve_with_local_and_a_token_is_a_usage_error(tmp_path: Path) -> None:
    from test_session_runs import evolve, explain, make_agent_repo as make_session_repo

    repo = tmp_path / "agent"
    make_session_repo(repo)
    result = evolve(repo, "--evolve-rounds", "1", env={"GITHUB_TOKEN": SECRET})
    assert result.returncode == 4, explain(result)
    assert "GITHUB_TOKEN" in result.stderr + result.stdout
    assert SECRET not in result.stderr + result.stdout
