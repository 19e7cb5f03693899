"""The sandbox backends on real processes: local, bwrap and a real docker daemon.

Every backend goes through ``require_backend`` (skipped locally when missing,
failed under CI).  Hostile scripts are bounded on their own (they give up after
a few seconds) so a limit that does not work fails the test instead of hanging
the suite or the machine.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import ALL_BACKENDS, ISOLATING_BACKENDS, require_backend

from agentdescent_core.sandbox.env import child_environment
from agentdescent_core.sandbox.interpreter import interpreter_paths
from agentdescent_core.sandbox.local import OUTPUT_LIMIT_BYTES, LocalBackend, SandboxSetupError
from agentdescent_core.sandbox.spec import Backend, Limits, RunResult, RunSpec

PY = sys.executable


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    return require_backend(request.param)


@pytest.fixture(params=ISOLATING_BACKENDS)
def isolating(request: pytest.FixtureRequest) -> Backend:
    return require_backend(request.param)


class Layout:
    """A workspace with an artifact folder and a test file, a scratch dir, a hidden repo."""

    def __init__(self, root: Path) -> None:
        self.workspace = root / "ws"
        self.skills = self.workspace / "skills"
        self.skills.mkdir(parents=True)
        (self.skills / "SKILL.md").write_text("# skill\n")
        self.test_file = self.workspace / "tests" / "test_agent.py"
        self.test_file.parent.mkdir()
        self.test_file.write_text("def test_x():\n    assert False\n")
        self.scratch = root / "scratch"
        self.scratch.mkdir()
        self.repo = root / "user-repo"
        self.repo.mkdir()
        (self.repo / "secret.txt").write_text("user's real repository\n")

    def spec(self, argv: list[str], **overrides: Any) -> RunSpec:
        values: dict[str, Any] = {
            "argv": argv,
            "workspace": self.workspace,
            "scratch": self.scratch,
            "env": {"PATH": "/usr/bin:/bin", "HOME": str(self.scratch), "LC_ALL": "C.UTF-8"},
            "timeout": 30.0,
            "writable": [self.skills],
            "readable": list(interpreter_paths()),
            "hidden": [self.repo],
        }
        values.update(overrides)
        return RunSpec(**values)

    def python(self, code: str, **overrides: Any) -> RunSpec:
        return self.spec([PY, "-c", textwrap.dedent(code)], **overrides)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def run(backend: Backend, spec: RunSpec) -> RunResult:
    result = backend.run(spec)
    assert result.duration <= spec.timeout + 10
    return result


# --------------------------------------------------------------------------- basics


def test_exit_code_stdout_and_stderr_come_back_separately(backend: Backend, layout: Layout) -> None:
    result = run(
        backend,
        layout.python(
            """
            import os, sys
            print("to stdout", os.getcwd())
            print("to stderr", file=sys.stderr)
            sys.exit(7)
            """
        ),
    )
    assert result.returncode == 7
    assert result.killed is None
    assert result.stdout == f"to stdout {layout.workspace}\n"
    assert result.stderr == "to stderr\n"


def test_a_signal_is_a_negative_returncode(backend: Backend, layout: Layout) -> None:
    result = run(backend, layout.python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"))
    assert result.returncode == -15
    assert result.killed is None


def test_environment_is_exactly_the_spec(
    backend: Backend, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_must_not_leak")
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", "actions_must_not_leak")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-passed")
    env = child_environment(os.environ, scratch=layout.scratch, extra={"AGENTDESCENT_CHILD": "1"})
    result = run(backend, layout.spec(["/usr/bin/env", "-0"], env=env))
    assert result.ok, result.stderr
    seen = dict(item.split("=", 1) for item in result.stdout.split("\0") if item)
    assert "GITHUB_TOKEN" not in seen
    assert "ACTIONS_RUNTIME_TOKEN" not in seen
    assert "must_not_leak" not in result.stdout
    assert seen["ANTHROPIC_API_KEY"] == "sk-ant-passed"
    for name, value in env.items():
        assert seen[name] == value
    added = set(seen) - set(env)
    assert added <= set(getattr(backend, "added_env", ())), added


def test_output_is_truncated_keeping_head_and_tail(layout: Layout) -> None:
    code = f"""
    import sys
    sys.stdout.write("HEAD" + "x" * {OUTPUT_LIMIT_BYTES * 2} + "TAIL")
    """
    result = run(LocalBackend(), layout.python(code))
    assert result.ok
    assert result.stdout.startswith("HEAD")
    assert result.stdout.endswith("TAIL")
    assert "bytes of output dropped" in result.stdout
    assert len(result.stdout) < OUTPUT_LIMIT_BYTES + 200


def test_missing_workspace_is_a_setup_error(backend: Backend, layout: Layout) -> None:
    with pytest.raises(SandboxSetupError, match="does not exist"):
        backend.run(layout.spec(["/bin/true"], workspace=layout.workspace / "nope"))


def test_concurrent_runs_do_not_disturb_each_other(layout: Layout) -> None:
    """One run timing out (and its tree being swept) leaves a parallel run alone."""
    backend = LocalBackend()
    results: dict[str, RunResult] = {}
    slow = layout.python("import time; time.sleep(30)", timeout=1.0)
    fine = layout.python("import time; time.sleep(1.8); print('done')", timeout=20.0)
    threads = [
        threading.Thread(target=lambda: results.update(slow=backend.run(slow))),
        threading.Thread(target=lambda: results.update(fine=backend.run(fine))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results["slow"].killed == "timeout"
    assert results["fine"].ok
    assert results["fine"].stdout == "done\n"


def test_docker_imports_its_empty_image_when_missing(layout: Layout) -> None:
    require_backend("docker")
    from agentdescent_core.sandbox.container import DockerBackend

    tag = f"agentdescent-empty-test:{uuid.uuid4().hex[:12]}"
    backend = DockerBackend(empty_image=tag)
    try:
        assert backend.unavailable_reason() is None
        result = backend.run(layout.python("import sys; print(sys.version_info[0])"))
        assert result.stdout == "3\n"
    finally:
        import docker

        client = docker.from_env()
        client.images.remove(tag, force=True)


# --------------------------------------------------------------------------- limits

# A child that leaves its process group, and a grandchild of it, both writing a heartbeat.
TREE = """
import os, sys, time
beat = sys.argv[1]
def heartbeat(tag):
    deadline = time.time() + 20
    while time.time() < deadline:
        with open(beat, "a") as out:
            out.write(tag)
        time.sleep(0.05)
    os._exit(0)
if os.fork() == 0:
    os.setpgid(0, 0)
    if os.fork() == 0:
        heartbeat("g")
    heartbeat("c")
heartbeat("p")
"""


def test_timeout_kills_the_child_and_its_grandchildren(backend: Backend, layout: Layout) -> None:
    beat = layout.scratch / "beat"
    started = time.monotonic()
    result = run(backend, layout.spec([PY, "-c", TREE, str(beat)], timeout=1.5))
    assert time.monotonic() - started < 8
    assert result.killed == "timeout"
    assert result.returncode is None
    assert not result.ok
    written = beat.read_text()
    assert {"p", "c", "g"} <= set(written)  # every process did run
    time.sleep(0.4)
    size = beat.stat().st_size
    time.sleep(0.4)
    assert beat.stat().st_size == size, "a process of the run is still alive"


def test_cpu_time_limit(backend: Backend, layout: Layout) -> None:
    code = """
    import time
    end = time.time() + 15
    while time.time() < end:
        pass
    print("never stopped")
    """
    result = run(backend, layout.python(code, limits=Limits(cpu_seconds=1), timeout=20))
    assert result.killed == "cpu"
    assert "never stopped" not in result.stdout
    assert result.duration < 10


def test_memory_hog_is_stopped(backend: Backend, layout: Layout) -> None:
    code = """
    blob = b"x" * (1024 * 1024 * 1024)
    print("allocated", len(blob))
    """
    result = run(backend, layout.python(code, limits=Limits(memory_mb=256), timeout=30))
    assert "allocated" not in result.stdout
    assert result.killed == "memory" or (result.returncode not in (0, None))
    if result.killed is None:
        assert "MemoryError" in result.stderr


# Forks until refused, at most FANOUT children per process and DEPTH levels (341 processes),
# and gives up after a few seconds: a failed limit is a test failure, never a hung machine.
BOMB = """
import os, sys, time
deadline = time.time() + 3
depth, children, refused = 0, 0, False
while time.time() < deadline:
    if depth < 4 and children < 4:
        try:
            pid = os.fork()
        except OSError:
            if not refused:
                refused = True
                print("fork refused", flush=True)
            time.sleep(0.05)
            continue
        if pid == 0:
            depth, children = depth + 1, 0
            continue
        children += 1
    else:
        time.sleep(0.05)
if depth == 0:
    print("bomb finished", flush=True)
"""


def test_fork_bomb_is_stopped(backend: Backend, layout: Layout) -> None:
    started = time.monotonic()
    result = run(backend, layout.python(BOMB, limits=Limits(max_processes=32), timeout=20))
    assert time.monotonic() - started < 15
    stopped_by_kill = result.killed == "processes"
    refused = "fork refused" in result.stdout
    assert stopped_by_kill or refused, result


# --------------------------------------------------------------------------- file system


def test_local_does_not_isolate_the_file_system(layout: Layout) -> None:
    """Documented: under local only the frozen-file check after the run catches this."""
    code = f"open({str(layout.test_file)!r}, 'w').write('def test_x():\\n    assert True\\n')"
    result = run(LocalBackend(), layout.python(code))
    assert result.ok
    assert "assert True" in layout.test_file.read_text()


def test_local_refuses_network_none(layout: Layout) -> None:
    with pytest.raises(SandboxSetupError, match="--evolve-network"):
        LocalBackend().run(layout.spec(["/bin/true"], network="none"))


PROBE = """
import json, os, sys
targets = json.loads(sys.argv[1])
report = {}
for name, path in targets["see"].items():
    report[name] = "visible" if os.path.exists(path) else "absent"
for name, path in targets["write"].items():
    try:
        with open(path, "w") as out:
            out.write("candidate was here")
        report[name] = "written"
    except OSError as exc:
        report[name] = "refused: " + exc.strerror
print(json.dumps(report))
"""


def test_isolating_backend_confines_writes(isolating: Backend, layout: Layout) -> None:
    marker = f"agentdescent-probe-{uuid.uuid4().hex}"
    host_home = Path.home() / marker
    host_tmp = Path("/tmp") / marker
    host_tmp_existing = Path("/tmp") / (marker + "-existing")
    host_tmp_existing.write_text("host temp file")
    targets = {
        "write": {
            "artifact": str(layout.skills / "SKILL.md"),
            "new_artifact": str(layout.skills / "helper.py"),
            "scratch": str(layout.scratch / "out.txt"),
            "test_file": str(layout.test_file),
            "conftest": str(layout.workspace / "conftest.py"),
            "repo": str(layout.repo / "secret.txt"),
            "home": str(host_home),
            "tmp": str(host_tmp),
        },
        "see": {
            "repo_secret": str(layout.repo / "secret.txt"),
            "host_tmp_file": str(host_tmp_existing),
        },
    }
    try:
        result = run(isolating, layout.spec([PY, "-c", PROBE, json.dumps(targets)]))
        assert result.ok, result.stderr
        report = json.loads(result.stdout)
        assert report["artifact"] == "written"
        assert report["new_artifact"] == "written"
        assert report["scratch"] == "written"
        assert report["test_file"].startswith("refused")
        assert report["conftest"].startswith("refused")
        assert report["repo_secret"] == "absent"
        assert report["host_tmp_file"] == "absent"
        # Whatever the sandbox let the child do, the host saw none of it.
        assert layout.test_file.read_text() == "def test_x():\n    assert False\n"
        assert not (layout.workspace / "conftest.py").exists()
        assert (layout.repo / "secret.txt").read_text() == "user's real repository\n"
        assert not host_home.exists()
        assert not host_tmp.exists()
        assert (layout.skills / "SKILL.md").read_text() == "candidate was here"
    finally:
        for path in (host_home, host_tmp, host_tmp_existing):
            path.unlink(missing_ok=True)


# --------------------------------------------------------------------------- network


@pytest.fixture
def tcp_server() -> Iterator[int]:
    """A TCP server on every host address that answers each connection with b"hi"."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hi")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    server.close()


def host_address(backend: Backend) -> str:
    """Where the host's server is reached from inside the sandbox's default network."""
    if backend.name != "docker":
        return "127.0.0.1"
    import docker

    config = docker.from_env().networks.get("bridge").attrs["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


CONNECT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as conn:
        print("connected", conn.recv(2).decode())
except OSError as exc:
    print("blocked", type(exc).__name__)
"""


def test_network_none_cuts_connections(isolating: Backend, layout: Layout, tcp_server: int) -> None:
    address = host_address(isolating)
    argv = [PY, "-c", CONNECT, address, str(tcp_server)]
    cut = run(isolating, layout.spec(argv, network="none"))
    assert cut.ok, cut.stderr
    assert cut.stdout.startswith("blocked"), cut.stdout
    # The same probe with the network on reaches the server: the cut above is the sandbox's.
    if isolating.name != "docker" or os.environ.get("AGENTDESCENT_TEST_DOCKER_BRIDGE") != "0":
        open_net = run(isolating, layout.spec(argv, network="default"))
        assert open_net.stdout == "connected hi\n", open_net
