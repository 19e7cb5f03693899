"""The child environment allowlist, the interpreter paths, and choosing a backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentdescent_core.sandbox.env import (
    DEFAULT_ENV_ALLOWLIST,
    NEVER_PASSED,
    child_environment,
    is_never_passed,
)
from agentdescent_core.sandbox.interpreter import interpreter_paths, minimal_paths
from agentdescent_core.sandbox.select import describe_backend, get_backend
from agentdescent_core.sandbox.spec import BACKEND_NAMES, Backend

HOST = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "xterm",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "OPENAI_BASE_URL": "http://localhost:9/v1",
    "GITHUB_TOKEN": "ghp_secret",
    "GH_TOKEN": "gho_secret",
    "ACTIONS_RUNTIME_TOKEN": "actions-secret",
    "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token.example",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "HOME": "/home/someone",
    "TMPDIR": "/host/tmp",
    "PYTHONPATH": "/somewhere",
    "SOME_OTHER": "value",
}


def test_default_allowlist_passes_agent_keys_and_locale_only(tmp_path: Path) -> None:
    env = child_environment(HOST, scratch=tmp_path / "scratch")
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "xterm",
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "OPENAI_BASE_URL": "http://localhost:9/v1",
        "HOME": str(tmp_path / "scratch" / "home"),
        "TMPDIR": str(tmp_path / "scratch" / "tmp"),
        "PYTHONNOUSERSITE": "1",
    }
    assert (tmp_path / "scratch" / "home").is_dir()
    assert (tmp_path / "scratch" / "tmp").is_dir()


def test_wildcard_allowlist_still_never_passes_credentials(tmp_path: Path) -> None:
    env = child_environment(HOST, ["*"], scratch=tmp_path)
    for name in ("GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        assert name not in env
    assert env["SOME_OTHER"] == "value"
    assert env["PYTHONPATH"] == "/somewhere"
    # HOME / TMPDIR always point into the scratch directory, whatever the host says.
    assert env["HOME"] == str(tmp_path / "home")
    assert env["TMPDIR"] == str(tmp_path / "tmp")


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "GH_TOKEN"])
def test_naming_a_credential_in_the_allowlist_is_an_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name}.*never passed.*evolve_env"):
        child_environment(HOST, ["PATH", name], scratch=tmp_path)


def test_allowlist_must_be_a_sequence_of_names(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="pass"):
        child_environment(HOST, "PATH", scratch=tmp_path)
    with pytest.raises(ValueError, match="non-empty"):
        child_environment(HOST, ["PATH", ""], scratch=tmp_path)


def test_extra_variables_come_last_and_override(tmp_path: Path) -> None:
    extra = {
        "PYTHONPYCACHEPREFIX": "/state/pycache",
        "HOME": "/elsewhere",
        "AGENTDESCENT_CHILD": "1",
    }
    env = child_environment(HOST, ["PATH"], scratch=tmp_path, extra=extra)
    assert env["PYTHONPYCACHEPREFIX"] == "/state/pycache"
    assert env["HOME"] == "/elsewhere"
    assert env["AGENTDESCENT_CHILD"] == "1"
    assert set(env) == {"PATH", "HOME", "TMPDIR", "PYTHONNOUSERSITE", *extra}


def test_never_passed_patterns() -> None:
    assert is_never_passed("ACTIONS_CACHE_URL")
    assert is_never_passed("ACTIONS_ANYTHING_NEW")
    assert not is_never_passed("ANTHROPIC_API_KEY")
    assert not any(is_never_passed(name) for name in DEFAULT_ENV_ALLOWLIST)
    assert "GITHUB_TOKEN" in NEVER_PASSED


def test_allowlist_patterns_are_case_sensitive(tmp_path: Path) -> None:
    env = child_environment({"path": "x", "LC_TIME": "C"}, ["PATH", "LC_*"], scratch=tmp_path)
    assert "path" not in env
    assert env["LC_TIME"] == "C"


# --------------------------------------------------------------------------- interpreter paths


def test_minimal_paths_drops_nested_and_duplicates() -> None:
    paths = [Path("/a/b"), Path("/a"), Path("/c/d"), Path("/a/b/c"), Path("/c/d"), Path("/cd")]
    assert minimal_paths(paths) == (Path("/a"), Path("/c/d"), Path("/cd"))


def test_interpreter_paths_cover_the_interpreter_and_project() -> None:
    paths = interpreter_paths()
    assert len(paths) == len(set(paths))
    for path in paths:
        assert path.is_absolute()
        assert path.exists()
        assert not any(path != other and path.is_relative_to(other) for other in paths)

    def covered(target: str) -> bool:
        resolved = Path(target).resolve()
        return any(resolved.is_relative_to(p.resolve()) for p in paths)

    import agentdescent_core
    import pytest_agentdescent

    assert covered(sys.executable)
    assert covered(sys.base_prefix)
    assert covered(pytest.__file__)
    assert covered(agentdescent_core.__file__)
    assert covered(pytest_agentdescent.__file__)


def test_interpreter_paths_ignore_script_and_test_directories(tmp_path: Path) -> None:
    """pytest and scripts prepend their own directories to sys.path; none of them leaks."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from agentdescent_core.sandbox.interpreter import interpreter_paths;"
        "print('\\n'.join(map(str, interpreter_paths())))"
    )
    import agentdescent_core

    project = Path(agentdescent_core.__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=project,
    )
    listed = [Path(line) for line in done.stdout.splitlines()]
    assert listed
    assert not any(tmp_path.is_relative_to(p) for p in listed)


# --------------------------------------------------------------------------- select


def test_unknown_backend_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown sandbox backend 'chroot'") as info:
        get_backend("chroot")
    for name in BACKEND_NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("name", ["local", "bwrap", "docker"])
def test_named_backends_are_built_once_per_process(name: str) -> None:
    backend = get_backend(name)
    assert isinstance(backend, Backend)
    assert backend.name == name
    assert get_backend(name) is backend


def test_docker_backends_differ_by_image() -> None:
    assert get_backend("docker", image="some/image:1") is not get_backend("docker")
    assert get_backend("docker", image="some/image:1") is get_backend(
        "docker", image="some/image:1"
    )


def test_auto_picks_the_strongest_usable_backend() -> None:
    chosen = get_backend("auto")
    assert chosen.unavailable_reason() is None
    order = ["docker", "bwrap", "local"]
    for stronger in order[: order.index(chosen.name)]:
        assert get_backend(stronger).unavailable_reason() is not None


def test_describe_backend_is_one_line_naming_backend_and_network() -> None:
    line = describe_backend(get_backend("local"), network="default")
    assert line.startswith("sandbox: local (")
    assert "no file-system isolation" in line
    assert "network default" in line
    assert "\n" not in line


def test_describe_backend_says_when_a_backend_is_not_usable() -> None:
    backend = get_backend("docker", image="agentdescent-test/never-present:0")
    reason = backend.unavailable_reason()
    assert reason is not None
    assert "never pulled" in reason or "docker daemon" in reason
    assert "NOT USABLE" in describe_backend(backend)
