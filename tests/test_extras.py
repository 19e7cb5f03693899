"""The base install works without the extras, and a missing extra names its ``pip install``.

``anthropic``, ``openai`` and ``docker`` are extras.  To run as a base install
would, each child Python here starts with a ``sitecustomize`` that puts a
finder first on ``sys.meta_path`` refusing those packages with the
ModuleNotFoundError Python raises for a package that is not installed.  Then:
every shipped module imports, the offline example's dry run succeeds (``auto``
passing over docker), and asking for a model or the docker sandbox is a usage
error (exit 4) naming the command that installs the extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import user_git, write

from agentdescent_core.errors import AgentDescentError, MissingExtra
from agentdescent_core.extras import EXTRAS, require_extra

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("anthropic", "openai", "docker")

SITECUSTOMIZE = '''
import sys

BLOCKED = {blocked!r}


class _NotInstalled:
    """Answers for the blocked packages as Python does when they are absent."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def without_extras(tmp_path: Path) -> dict[str, str]:
    """An environment whose Pythons cannot import the three extras' packages."""
    site = tmp_path / "no-extras"
    write(site / "sitecustomize.py", SITECUSTOMIZE.format(blocked=BLOCKED))
    # PYTEST_ADDOPTS stays: it only leaves out this machine's unused pytest plugins
    # (tests/conftest.py), none of which is an extra of ours.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTDESCENT_")}
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                 "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _python(env: dict[str, str], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _pytest(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def _explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr}"


def test_the_blocker_really_hides_the_packages(without_extras: dict[str, str],
                                               tmp_path: Path) -> None:
    # guards every test below: without it they would pass on a full install
    code = ("import importlib\nfor name in ('anthropic', 'openai', 'docker', 'docker.errors'):\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except ModuleNotFoundError as exc:\n        print('absent', exc.name)\n")
    done = _python(without_extras, code, tmp_path)
    assert done.returncode == 0, _explain(done)
    assert done.stdout.split("\n")[:4] == ["absent anthropic", "absent openai",
                                           "absent docker", "absent docker"]


def test_every_shipped_module_imports_without_the_extras(without_extras: dict[str, str],
                                                         tmp_path: Path) -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "names = []\n"
        "for top in ('agentdescent_core', 'pytest_agentdescent'):\n"
        "    package = importlib.import_module(top)\n"
        "    names += [top] + [m.name for m in\n"
        "                      pkgutil.walk_packages(package.__path__, top + '.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names),\n"
        "      sorted(m for m in ('anthropic', 'openai', 'docker') if m in sys.modules))\n"
    )
    done = _python(without_extras, code, tmp_path)
    assert done.returncode == 0, _explain(done)
    count, loaded = done.stdout.strip().split(" ", 1)
    assert int(count) > 50  # the walk found the packages' modules, not nothing
    assert loaded == "[]"


@pytest.fixture
def offline_example(tmp_path: Path) -> Path:
    """The support-bot example (a conftest proposer, no model) as a user's repository."""
    work = tmp_path / "support-bot"
    shutil.copytree(ROOT / "examples" / "support-bot", work,
                    ignore=shutil.ignore_patterns("__pycache__", ".agentdescent", "build"))
    user_git(work, "init", "--quiet", "--initial-branch=main")
    user_git(work, "add", "-A")
    user_git(work, "commit", "--quiet", "-m", "the example")
    return work


@pytest.mark.slow
def test_the_offline_example_dry_run_needs_no_extra(without_extras: dict[str, str],
                                                    offline_example: Path) -> None:
    done = _pytest(without_extras, offline_example, "--evolve", "skills/", "--evolve-dry-run")

    assert done.returncode == 0, _explain(done)
    # auto passed over docker, whose SDK is absent, to a backend that runs here
    assert "sandbox: docker" not in done.stdout
    assert "sandbox: bwrap" in done.stdout or "sandbox: local" in done.stdout, done.stdout
    report = json.loads((offline_example / ".agentdescent" / "report.json").read_text("utf-8"))
    assert report["error"] is None
    assert report["reward_after"] > report["reward_before"]


@pytest.mark.parametrize(("model", "extra"), [("anthropic:claude-haiku-4-5", "anthropic"),
                                              ("openai:gpt-4o-mini", "openai")])
def test_a_model_without_its_sdk_is_a_usage_error_naming_the_extra(
        without_extras: dict[str, str], offline_example: Path, model: str, extra: str) -> None:
    # the key is set: the missing SDK, not the key, is what the user must be told about
    env = dict(without_extras, ANTHROPIC_API_KEY="sk-test", OPENAI_API_KEY="sk-test")
    done = _pytest(env, offline_example, "--evolve", "skills/", "--evolve-dry-run",
                   "--evolve-model", model)

    assert done.returncode == 4, _explain(done)
    assert (f"--evolve-model {model} needs the {extra} SDK: "
            f"pip install 'pytest-agentdescent[{extra}]'") in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "ModuleNotFoundError" not in done.stdout + done.stderr


def test_an_explicit_docker_sandbox_without_its_sdk_names_the_extra(
        without_extras: dict[str, str], offline_example: Path) -> None:
    done = _pytest(without_extras, offline_example, "--evolve", "skills/", "--evolve-dry-run",
                   "--evolve-sandbox", "docker")

    assert done.returncode == 4, _explain(done)
    assert "--evolve-sandbox docker" in done.stderr
    assert "the docker SDK is not installed" in done.stderr
    assert "pip install 'pytest-agentdescent[docker]'" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_the_model_client_itself_raises_missing_extra(without_extras: dict[str, str],
                                                      tmp_path: Path) -> None:
    # a library user of claude() gets the same pip command, as an exception they can catch
    code = (
        "from agentdescent_core.errors import MissingExtra\n"
        "from agentdescent_core.proposers.completions import claude, openai_compatible\n"
        "for build in (lambda: claude(api_key='k'), "
        "lambda: openai_compatible('m', base_url='http://127.0.0.1:9/v1')):\n"
        "    try:\n        build()\n"
        "    except MissingExtra as exc:\n        print(exc.extra, '|', exc)\n"
    )
    done = _python(without_extras, code, tmp_path)
    assert done.returncode == 0, _explain(done)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, _explain(done)
    assert lines[0].startswith("anthropic | the anthropic SDK is not installed")
    assert lines[0].endswith("pip install 'pytest-agentdescent[anthropic]'")
    assert lines[1].startswith("openai | the openai SDK is not installed")
    assert lines[1].endswith("pip install 'pytest-agentdescent[openai]'")


def test_require_extra_passes_when_the_package_is_installed() -> None:
    # this suite's environment has [all] (the [test] extra brings it)
    for extra in ("anthropic", "openai", "docker"):
        require_extra(extra)


def test_missing_extra_is_an_import_error_and_one_of_ours() -> None:
    exc = MissingExtra(module="docker", extra="docker", what="the docker SDK")
    assert isinstance(exc, ImportError)
    assert isinstance(exc, AgentDescentError)
    assert exc.name == "docker"
    assert exc.pip_command == "pip install 'pytest-agentdescent[docker]'"
    assert str(exc).endswith(exc.pip_command)


def test_an_unknown_extra_is_a_clear_error() -> None:
    with pytest.raises(ValueError,
                       match=r"unknown extra 'gpu': one of anthropic, dask, docker, openai"):
        require_extra("gpu")  # type: ignore[arg-type]


def test_every_extra_in_the_table_is_declared_in_pyproject() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    optional = project["optional-dependencies"]
    for extra, (module, _what) in EXTRAS.items():
        assert any(spec.startswith(module) for spec in optional[extra]), extra
    assert optional["all"] == ["pytest-agentdescent[anthropic,openai,docker,dask]"]
    assert "pytest-agentdescent[all]" in optional["test"]
    base = " ".join(project["dependencies"])
    assert not any(name in base for name in BLOCKED)
