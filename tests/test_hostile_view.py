"""Issue 14, classes 1 and 6: the world a candidate sees, and limits for the whole sandbox.

Under ``bwrap`` and ``docker`` a candidate must not reach a host unix socket
(``/var/run/docker.sock`` gives root on the host), must not see ``/run``,
``/var/run``, the host's ``/tmp`` and ``/dev/shm`` or ``$HOME``, and must not
hold more memory than ``limits.memory_mb`` by spreading it over processes or
parking it in a tmpfs.  Every case is a real script run through the real
backend (or through :class:`SandboxedVerifier`, where the record a test gets
matters), with a control that shows the same script does reach the thing
when nothing stops it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import ISOLATING_BACKENDS, child_pytest_args, require_backend
from test_hostile_candidates import ACT, GUARD, TASK, clean_state, make_agent_repo
from test_sandbox_backends import PY, Layout

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.interpreter import interpreter_paths
from agentdescent_core.sandbox.local import LocalBackend, SandboxSetupError
from agentdescent_core.sandbox.memwatch import guard_mechanism
from agentdescent_core.sandbox.spec import Backend, Limits, RunResult

MIB = 1024 * 1024
SMALL = Limits(memory_mb=512, max_processes=64, cpu_seconds=60)


@pytest.fixture(params=ISOLATING_BACKENDS)
def isolating(request: pytest.FixtureRequest) -> Backend:
    return require_backend(request.param)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def run_py(
    backend: Backend, layout: Layout, code: str, *args: str, **overrides: object
) -> RunResult:
    spec = layout.spec([PY, "-c", textwrap.dedent(code), *args], **overrides)
    result = backend.run(spec)
    assert result.duration <= spec.timeout + 10
    return result


# --------------------------------------------------------------------------- host sockets


@pytest.fixture
def host_unix_sockets() -> Iterator[list[socket.socket]]:
    """Listening unix sockets in places of the host a candidate must not reach."""
    places = [Path(tempfile.gettempdir()) / f"agentdescent-sock-{uuid.uuid4().hex[:8]}"]
    if os.access("/run", os.W_OK):
        places.append(Path("/run") / f"agentdescent-sock-{uuid.uuid4().hex[:8]}")
    if os.access("/dev/shm", os.W_OK):
        places.append(Path("/dev/shm") / f"agentdescent-sock-{uuid.uuid4().hex[:8]}")
    servers: list[socket.socket] = []
    for place in places:
        place.mkdir()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(place / "s.sock"))
        os.chmod(place, 0o777)
        os.chmod(place / "s.sock", 0o777)
        server.listen(8)
        server.setblocking(False)
        servers.append(server)
    yield servers
    for server in servers:
        path = Path(server.getsockname())
        server.close()
        path.unlink(missing_ok=True)
        path.parent.rmdir()


def accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


UNIX_CONNECT = """
import json, socket, sys
report = {}
for path in sys.argv[1:]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(3)
    try:
        conn.connect(path)
    except OSError as exc:
        report[path] = "refused: " + type(exc).__name__
        continue
    report[path] = "connected"
    try:  # what a daemon would answer (the test's own servers say nothing)
        conn.sendall(b"GET /version HTTP/1.0\\r\\n\\r\\n")
        conn.settimeout(1)
        report[path] += ": " + conn.recv(200).decode("latin-1")[:40]
    except OSError:
        pass
    conn.close()
print(json.dumps(report))
"""

DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


def test_host_unix_sockets_are_unreachable(
    isolating: Backend, layout: Layout, host_unix_sockets: list[socket.socket]
) -> None:
    targets = [*DOCKER_SOCKETS, *(s.getsockname() for s in host_unix_sockets)]
    for network in ("none", "default"):  # a unix socket is a file: the network mode is no help
        result = run_py(isolating, layout, UNIX_CONNECT, *targets, network=network)
        assert result.ok, result.stderr
        report = json.loads(result.stdout)
        assert all(v.startswith("refused") for v in report.values()), report
        assert not any(accepted(server) for server in host_unix_sockets)
    # Control: the same script on the bare host reaches every socket of the test.
    bare = run_py(
        LocalBackend(), layout, UNIX_CONNECT, *(s.getsockname() for s in host_unix_sockets)
    )
    assert all(v.startswith("connected") for v in json.loads(bare.stdout).values()), bare.stdout
    assert all(accepted(server) for server in host_unix_sockets)


ABSTRACT_CONNECT = """
import socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.settimeout(3)
try:
    conn.connect("\\0" + sys.argv[1])
    print("connected")
except OSError as exc:
    print("refused:", type(exc).__name__)
"""


def test_abstract_unix_sockets_need_network_none(isolating: Backend, layout: Layout) -> None:
    """An abstract unix socket lives in the network namespace, not in the file system.

    With network ``none`` both backends give the candidate its own namespace;
    with ``default`` docker's bridge does too, but ``bwrap`` shares the host's
    (documented as not covered: use network none).
    """
    name = f"agentdescent-abstract-{uuid.uuid4().hex[:8]}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(4)
    server.setblocking(False)
    try:
        modes = ["none", "default"] if isolating.name == "docker" else ["none"]
        for network in modes:
            result = run_py(isolating, layout, ABSTRACT_CONNECT, name, network=network)
            assert result.stdout.startswith("refused"), (network, result)
            assert not accepted(server)
        bare = run_py(LocalBackend(), layout, ABSTRACT_CONNECT, name)
        assert bare.stdout == "connected\n", bare
        assert accepted(server)
    finally:
        server.close()


@pytest.mark.parametrize("listed", ["/var/run", "/run", "/var/run/docker.sock", "/run/docker.sock"])
def test_the_docker_socket_is_refused_even_when_listed(
    isolating: Backend, layout: Layout, listed: str
) -> None:
    for field in ("readable", "writable"):
        spec = layout.spec([PY, "-c", "print('ran')"], **{field: [Path(listed)]})
        with pytest.raises(SandboxSetupError, match="daemon socket"):
            isolating.run(spec)


# --------------------------------------------------------------------------- host places

LOOK = """
import json, os, sys
targets = json.loads(sys.argv[1])
report = {"exists": {n: os.path.lexists(p) for n, p in targets.items()}, "list": {}}
for place in ("/run", "/var/run", "/dev/shm", "/var", "/opt", "/home", "/mnt", "/srv"):
    try:
        report["list"][place] = sorted(os.listdir(place))
    except OSError as exc:
        report["list"][place] = type(exc).__name__
try:
    report["shadow"] = len(open("/etc/shadow", "rb").read())
except OSError as exc:
    report["shadow"] = type(exc).__name__
report["tmp_writable"] = os.access("/tmp", os.W_OK)
print(json.dumps(report))
"""


def test_host_places_are_not_visible(isolating: Backend, layout: Layout) -> None:
    marker = f"agentdescent-view-{uuid.uuid4().hex[:10]}"
    planted = {
        "host_tmp": Path(tempfile.gettempdir()) / marker,
        "home": Path.home() / marker,
        "dev_shm": Path("/dev/shm") / marker,
    }
    if os.access("/run", os.W_OK):
        planted["run"] = Path("/run") / marker
    for path in planted.values():
        path.write_text("host secret\n")
    try:
        targets = {name: str(path) for name, path in planted.items()}
        result = run_py(isolating, layout, LOOK, json.dumps(targets))
        assert result.ok, result.stderr
        report = json.loads(result.stdout)
        assert report["exists"] == {name: False for name in planted}, report
        for place in ("/run", "/var/run", "/var", "/opt", "/home", "/mnt", "/srv"):
            assert report["list"][place] == "FileNotFoundError", (place, report["list"][place])
        assert report["list"]["/dev/shm"] == []  # private and empty
        # masked by a nodev /dev/null (bwrap) or not mounted (docker): never its content
        assert report["shadow"] in (0, "PermissionError", "FileNotFoundError")
        assert report["tmp_writable"]
        # Control: the host really has what the sandbox did not show.
        assert all(path.exists() for path in planted.values())
    finally:
        for path in planted.values():
            path.unlink(missing_ok=True)


def test_interpreters_still_run_in_the_minimal_view(isolating: Backend, layout: Layout) -> None:
    """The pyenv interpreter (this one), a venv made from it, and Debian's /usr/bin/python3."""
    code = "import json, ssl, sqlite3, sys; print(json.dumps([sys.prefix, ssl.OPENSSL_VERSION]))"
    mine = run_py(isolating, layout, code)
    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout)[0] == sys.prefix
    # A venv under the host's temp dir: bound at its own path on top of the private /tmp.
    venv = layout.scratch.parent / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    readable = [venv, *interpreter_paths()]
    in_venv = isolating.run(layout.spec([str(venv / "bin/python"), "-c", code], readable=readable))
    assert in_venv.returncode == 0, in_venv.stderr
    assert json.loads(in_venv.stdout)[0] == str(venv)
    if Path("/usr/bin/python3").exists():  # the system's own: nothing to list
        debian = isolating.run(layout.spec(["/usr/bin/python3", "-c", code], readable=[]))
        assert debian.returncode == 0, debian.stderr
        assert json.loads(debian.stdout)[0] == "/usr"


# --------------------------------------------------------------------------- memory


# A process holding memory, and the parent parking 3 GB in a tmpfs.  It gives up
# after a few seconds, so a ceiling that does not hold fails the test, not the machine.
def tmpfs_hog(target_dir: str, hold_mb: int = 200) -> str:
    return textwrap.dedent(f"""
        import os, sys, time
        if os.fork() == 0:
            hold = bytearray({hold_mb} * 1024 * 1024)
            hold[::4096] = b"x" * len(hold[::4096])
            time.sleep(20)
            os._exit(0)
        chunk = b"x" * (64 * 1024 * 1024)
        written = 0
        deadline = time.time() + 15
        try:
            with open(os.path.join({target_dir!r}, "fill"), "wb") as out:
                while written < 3 * 1024 ** 3 and time.time() < deadline:
                    out.write(chunk)
                    out.flush()
                    written += len(chunk)
        except OSError as exc:
            print("write stopped:", exc, file=sys.stderr)
        print("parked", written // (1024 * 1024), "MB", file=sys.stderr, flush=True)
        time.sleep(5)
        print("hello")
    """)


# Many processes, each far below RLIMIT_AS, together far above memory_mb.
SPREAD = """
import os
held_r, held_w = os.pipe()
wait_r, wait_w = os.pipe()  # never written: children hold their share until the run ends
for _ in range(8):
    if os.fork() == 0:
        hold = bytearray(120 * 1024 * 1024)
        hold[::4096] = b"x" * len(hold[::4096])
        os.write(held_w, b"x")
        os.read(wait_r, 1)
        os._exit(0)
held = 0
while held < 8:  # blocks until every child holds its share (the spec timeout bounds it)
    held += len(os.read(held_r, 8))
print("all held")
"""


@pytest.fixture(params=["bwrap-cgroup", "bwrap-watch", "docker"])
def memory_sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Backend:
    """bwrap with this machine's mechanism (a cgroup where one can be made) and with the
    fallback watcher; docker, whose container cgroup is the mechanism."""
    name, _, kind = str(request.param).partition("-")
    backend = require_backend(name)
    if kind == "watch":
        monkeypatch.setenv("AGENTDESCENT_MEMORY_GUARD", "watch")
        assert guard_mechanism() == "watch"
    elif kind == "cgroup" and guard_mechanism() == "watch":
        pytest.skip("no cgroup can be made on this machine: only the watcher runs here")
    return backend


@pytest.fixture(params=["cgroup", "watch"])
def guard_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """For ``local``: the machine's mechanism, and the fallback watcher."""
    if request.param == "watch":
        monkeypatch.setenv("AGENTDESCENT_MEMORY_GUARD", "watch")
    elif guard_mechanism() == "watch":
        pytest.skip("no cgroup can be made on this machine: only the watcher runs here")
    return guard_mechanism()


@pytest.mark.parametrize("place", ["/tmp", "/dev/shm"])
def test_tmpfs_plus_a_holder_is_stopped_for_memory(
    memory_sandbox: Backend, layout: Layout, place: str
) -> None:
    result = run_py(memory_sandbox, layout, tmpfs_hog(place), limits=SMALL, timeout=40)
    assert result.killed == "memory", (guard_mechanism(), result)
    assert "hello" not in result.stdout
    assert result.duration < 20


def test_memory_spread_over_processes_is_stopped(memory_sandbox: Backend, layout: Layout) -> None:
    result = run_py(memory_sandbox, layout, SPREAD, limits=SMALL, timeout=40)
    assert result.killed == "memory", (guard_mechanism(), result)
    assert "all held" not in result.stdout
    # Control: the same processes fit under a ceiling that is large enough.
    fits = run_py(memory_sandbox, layout, SPREAD, limits=Limits(memory_mb=2048), timeout=40)
    assert fits.ok, fits
    assert fits.stdout == "all held\n", fits


def test_local_counts_the_whole_tree_too(layout: Layout, guard_kind: str) -> None:
    result = run_py(LocalBackend(), layout, SPREAD, limits=SMALL, timeout=40)
    assert result.killed == "memory", (guard_kind, result)


@pytest.fixture(scope="module", params=ISOLATING_BACKENDS)
def small_verifier(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SandboxedVerifier]:
    name = str(request.param)
    backend = require_backend(name)
    repo = tmp_path_factory.mktemp(f"view-{name}") / "repo"
    commit = make_agent_repo(repo)
    tree = FileTree(["skills"])
    verifier = SandboxedVerifier(
        repo, commit, TaskSplit(train=(TASK,), guards=(GUARD,)),
        tree=tree, frozen=FrozenSet(artifact_roots=tree.roots), backend=backend,
        cache=None, network="none", limits=SMALL, test_timeout=30.0, run_timeout=60.0,
        pytest_args=child_pytest_args(),
    )  # fmt: skip
    yield verifier
    verifier.close()


@pytest.mark.parametrize("place", ["/tmp", "/dev/shm"])
def test_memory_attack_candidate_is_stopped_and_the_next_scores(
    small_verifier: SandboxedVerifier, place: str
) -> None:
    state = {**clean_state(), ACT: tmpfs_hog(place) + f"# {uuid.uuid4().hex}\n"}
    samples = small_verifier.evaluate(state, [TASK, GUARD], 1)
    assert samples.rewards[TASK] == (0.0,)
    (record,) = small_verifier.records(state, TASK)
    shown = f"{record.outcome} {record.phase} {record.message} {record.output}"
    assert record.outcome in ("failed", "error"), shown
    if small_verifier.backend.name == "bwrap":
        # The whole sandbox died at the ceiling, before the test could record anything.
        assert "memory limit" in record.message, shown
    # The run goes on: the clean skill scores in the same workspace afterwards.
    again = small_verifier.evaluate(
        {**clean_state(), ACT: clean_state()[ACT] + f"# {place}\n"}, [TASK, GUARD], 1
    )
    assert again.rewards == {TASK: (1.0,), GUARD: (1.0,)}
