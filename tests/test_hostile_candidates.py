"""The hostile-candidates table: every attack is blocked or detected, under every backend.

Each candidate replaces the skill's script (``skills/greeter/act.py``) with one
that attacks the evaluation and then prints the expected answer, so an attack
that went unnoticed would earn the full reward.  Every row runs under every
backend available here (``local``, ``bwrap``, ``docker``; CI has all three), and
after each attack the clean skill must evaluate as before: the run goes on.

``local`` has no filesystem isolation, so there the frozen-file check and the
scan of the user's repository are the defence (*detected*); ``bwrap`` and
``docker`` must stop the same writes to committed files outright (*blocked*).
A new ``conftest.py`` or pytest config is *detected* under every backend: tests
may create files in the workspace as under plain pytest, so no mount can refuse
one by its name.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import snapshot, user_git, write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import AgentDescentError
from agentdescent_core.evaluation.cache import EvalCache
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.spec import Limits

TASK = "tests/test_greeter.py::test_greets"
GUARD = "tests/test_guard.py::test_skill_card_exists"
SECRET = "ghp_" + "Z" * 36
ACT = "skills/greeter/act.py"
SKILL = "skills/greeter/SKILL.md"

TEST_GREETER = '''\
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve
def test_greets():
    done = subprocess.run([sys.executable, str(ROOT / "skills/greeter/act.py")],
                          capture_output=True, text=True, timeout=120)
    print(done.stderr)
    assert done.stdout.strip().splitlines()[-1:] == ["hello"]
'''

TEST_GUARD = '''\
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve_guard
def test_skill_card_exists():
    assert (ROOT / "skills/greeter/SKILL.md").read_text().startswith("# Greeter")
'''

CLEAN_ACT = 'print("hello")\n'


def attack(body: str, *, catch: str = "OSError") -> str:
    """A script that tries ``body``, reports a refusal on stderr, then answers right."""
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return (
        "import os, pathlib, socket, sys, tempfile, time\n"
        "ROOT = pathlib.Path(__file__).resolve().parents[2]\n"
        f"try:\n{lines}\nexcept {catch} as exc:\n"
        "    print('attack stopped:', type(exc).__name__, exc, file=sys.stderr)\n"
        "print('hello')\n"
    )


@dataclass
class Host:
    """The world outside the workspace that an attack may try to reach."""

    repo: Path
    home: Path
    tmp: Path
    port: int
    connections: list[bytes]
    marker: str


@dataclass(frozen=True)
class Row:
    name: str
    script: str
    #: backends that cannot prevent this and must detect it (frozen-violation)
    detected_under: tuple[str, ...] = ()
    #: the test must fail (reward 0) because a limit cut the attack short
    fails: bool = False


def rows(host: Host) -> list[Row]:
    leak = f"agentdescent-hostile-{host.marker}"
    return [
        Row("rewrite-test-file",
            attack('(ROOT / "tests/test_greeter.py").write_text("def test_greets():\\n'
                   '    assert True\\n")'),
            detected_under=("local",)),
        # Tests may create files anywhere in the workspace (as under plain pytest), so a
        # new conftest.py or pytest config cannot be blocked by a read-only mount: it is
        # detected (frozen-violation) under every backend; committed files stay blocked.
        Row("add-conftest-at-root",
            attack('(ROOT / "conftest.py").write_text("import os\\n")'),
            detected_under=("local", "bwrap", "docker")),
        Row("add-conftest-in-artifact",
            attack('(ROOT / "skills/greeter/conftest.py").write_text("import os\\n")'),
            detected_under=("local", "bwrap", "docker")),
        Row("add-pytest-ini",
            attack('(ROOT / "tests/pytest.ini").write_text("[pytest]\\n")'),
            detected_under=("local", "bwrap", "docker")),
        Row("write-user-repository",
            attack(f'pathlib.Path({str(host.repo)!r}, "{leak}").write_text("x")'),
            detected_under=("local",)),
        Row("write-home",
            attack(f'(pathlib.Path.home() / "{leak}").write_text("x")')),
        Row("write-host-tmp",
            attack(f'pathlib.Path(tempfile.gettempdir(), "{leak}").write_text("x")')),
        Row("read-github-token",
            attack('print(os.environ.get("GITHUB_TOKEN", "no token"), file=sys.stderr)')),
        Row("fork-bomb",
            attack("kids = 0\nfor _ in range(400):\n    if os.fork() == 0:\n"
                   "        time.sleep(20)\n        os._exit(0)\n    kids += 1\n"
                   "print('forked', kids, file=sys.stderr)")),
        Row("memory-hog",
            attack("hog = bytearray(6 * 1024 ** 3)\nhog[::4096] = b'x' * len(hog[::4096])",
                   catch="(OSError, MemoryError)"),
            fails=False),
        Row("endless-loop", "while True:\n    pass\n", fails=True),
        Row("sleep-past-timeout", "import time\ntime.sleep(600)\nprint('hello')\n", fails=True),
        Row("symlink-to-test-file",
            attack('link = ROOT / "skills/greeter/notes.md"\n'
                   'os.symlink(ROOT / "tests/test_guard.py", link)\n'
                   'link.write_text("def test_skill_card_exists():\\n    assert True\\n")'),
            detected_under=("local",)),
        Row("symlink-to-etc-passwd",
            attack('os.symlink("/etc/passwd", ROOT / "skills/greeter/passwd.md")')),
        Row("delete-test-file",
            attack('(ROOT / "tests/test_guard.py").unlink()'),
            detected_under=("local",)),
    ]


def make_agent_repo(path: Path) -> str:
    user_git(path.parent, "init", "--quiet", "--initial-branch=main", path.name)
    write(path / "pytest.ini", "[pytest]\ntestpaths = tests\n")
    write(path / SKILL, "# Greeter\n\nSay hello.\n")
    write(path / ACT, CLEAN_ACT)
    write(path / "tests/test_greeter.py", TEST_GREETER)
    write(path / "tests/test_guard.py", TEST_GUARD)
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "agent repo")
    return user_git(path, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    root = tmp_path_factory.mktemp("hostile")
    connections: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _addr = server.accept()
            except OSError:
                continue
            with conn:
                connections.append(conn.recv(64) or b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield Host(repo=root / "repo", home=Path(os.path.expanduser("~")),
               tmp=Path(tempfile.gettempdir()), port=server.getsockname()[1],
               connections=connections, marker=uuid.uuid4().hex[:12])
    stop.set()
    thread.join(timeout=2)
    server.close()


def network_row(host: Host) -> Row:
    return Row("network-connection",
               attack(f'socket.create_connection(("127.0.0.1", {host.port}), timeout=3)'
                      '.sendall(b"leak")'))


@pytest.fixture(scope="module", params=ALL_BACKENDS)
def verifier(request: pytest.FixtureRequest, host: Host,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxedVerifier]:
    name = str(request.param)
    backend = require_backend(name)
    repo = tmp_path_factory.mktemp(f"repo-{name}") / "repo"
    commit = make_agent_repo(repo)
    host.repo = repo
    tree = FileTree(["skills"])
    frozen = FrozenSet(artifact_roots=tree.roots)
    verifier = SandboxedVerifier(
        repo, commit, TaskSplit(train=(TASK,), guards=(GUARD,)),
        tree=tree, frozen=frozen, backend=backend,
        cache=EvalCache(tmp_path_factory.mktemp(f"cache-{name}") / "eval.sqlite3"),
        network="default" if name == "local" else "none",
        limits=Limits(memory_mb=1024, max_processes=64, cpu_seconds=60),
        test_timeout=4.0, run_timeout=60.0, pytest_args=child_pytest_args(),
    )
    yield verifier
    verifier.close()


def clean_state() -> dict[str, str]:
    return {SKILL: "# Greeter\n\nSay hello.\n", ACT: CLEAN_ACT}


def leaked_files(host: Host) -> list[Path]:
    leak = f"agentdescent-hostile-{host.marker}"
    places = (host.repo / leak, host.home / leak, host.tmp / leak)
    return [p for p in places if p.exists()]


@pytest.mark.parametrize("row_name", [r.name for r in rows(Host(
    Path("/"), Path("/"), Path("/"), 0, [], "x"))] + ["network-connection"])
def test_hostile_candidate_is_blocked_or_detected(
    row_name: str, verifier: SandboxedVerifier, host: Host,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = verifier.backend.name
    table = {r.name: r for r in [*rows(host), network_row(host)]}
    row = table[row_name]
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    host.connections.clear()
    before = snapshot(host.repo)
    state = {**clean_state(), ACT: row.script + f"# {row.name} {uuid.uuid4().hex}\n"}

    samples = verifier.evaluate(state, [TASK, GUARD], 1)

    refusal = verifier.disqualification(state)
    records = verifier.records(state, TASK) + verifier.records(state, GUARD)
    shown = "\n".join(f"{r.outcome} {r.message} {r.output}" for r in records)
    if backend in row.detected_under:
        assert refusal is not None, f"{row.name} under {backend} went unnoticed:\n{shown}"
        assert refusal.category == "frozen-violation"
        assert samples.reward() == 0.0
    else:
        assert refusal is None, f"{row.name} under {backend}: {refusal}"
    if row.fails:
        assert samples.rewards[TASK] == (0.0,)
        assert any(r.phase == "timeout" for r in records), shown
    # Nothing escaped: no secret in what we keep, no file outside, no connection.
    assert SECRET not in shown
    leaked = leaked_files(host)
    if backend == "local" and row.name == "write-user-repository":
        # No isolation under local: the write happened, and was caught (above).
        assert leaked == [host.repo / f"agentdescent-hostile-{host.marker}"]
        leaked[0].unlink()
        leaked = []
    assert leaked == []
    assert host.connections == [] or backend == "local"
    assert snapshot(host.repo) == before or backend == "local"

    # The run goes on: the clean skill still scores as it did, in a restored workspace.
    again = verifier.evaluate({**clean_state(), ACT: CLEAN_ACT + f"# after {row.name}\n"},
                              [TASK, GUARD], 1)
    assert again.rewards == {TASK: (1.0,), GUARD: (1.0,)}, row.name


def test_local_refuses_to_pretend_it_can_cut_the_network(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    commit = make_agent_repo(repo)
    tree = FileTree(["skills"])
    local = require_backend("local")
    with pytest.raises(AgentDescentError, match="cannot cut the network"):
        SandboxedVerifier(repo, commit, TaskSplit(train=(TASK,)), tree=tree,
                          frozen=FrozenSet(artifact_roots=tree.roots), backend=local,
                          cache=None, network="none", pytest_args=child_pytest_args())
