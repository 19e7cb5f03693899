"""``agentdescent init``: the workflow it writes, the ini keys it adds, what it refuses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from conftest import make_user_repo, write

from pytest_agentdescent.cli import main
from pytest_agentdescent.cli.inifile import IniFile, find_inifile, set_keys


@pytest.fixture
def project(tmp_path: Path) -> Path:
    user = make_user_repo(tmp_path / "project")
    user.repo.close()
    return user.path


def run_init(project: Path, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    old = Path.cwd()
    os.chdir(project)
    try:
        result = runner.invoke(main, ["init", *args], catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def test_writes_a_scheduled_workflow_with_permissions_and_concurrency(project: Path) -> None:
    code, out, err = run_init(project, "--model", "anthropic:claude-sonnet-4-5",
                              "--schedule", "0 3 * * *")
    assert code == 0
    assert "add ANTHROPIC_API_KEY as a repository secret" in err
    assert "wrote .github/workflows/agentdescent.yml" in out
    text = (project / ".github/workflows/agentdescent.yml").read_text(encoding="utf-8")
    flow = yaml.safe_load(text)
    triggers = flow[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["schedule"] == [{"cron": "0 3 * * *"}]
    assert "workflow_dispatch" in triggers
    assert flow["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert flow["concurrency"]["cancel-in-progress"] is False
    steps = flow["jobs"]["evolve"]["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@")
    assert steps[0]["with"]["fetch-depth"] == 0
    action = next(s for s in steps if s.get("id") == "agentdescent")
    assert action["with"]["paths"] == "skills/"
    assert action["env"] == {"ANTHROPIC_API_KEY": "${{ secrets.ANTHROPIC_API_KEY }}"}
    # Every run step names its shell and splices no expression into the script.
    for step in steps:
        if "run" in step:
            assert "${{" not in step["run"]


def test_adds_tuning_keys_to_a_new_pytest_ini_but_never_evolve_paths(project: Path) -> None:
    code, out, _ = run_init(project, "--model", "openai:gpt-4o-mini", "--rounds", "4")
    assert code == 0
    ini = (project / "pytest.ini").read_text(encoding="utf-8")
    assert ini == "[pytest]\nevolve_rounds = 4\nevolve_model = openai:gpt-4o-mini\n"
    assert "set evolve_rounds, evolve_model in pytest.ini [pytest]" in out
    flow = yaml.safe_load((project / ".github/workflows/agentdescent.yml").read_text())
    action = next(s for s in flow["jobs"]["evolve"]["steps"] if s.get("id") == "agentdescent")
    assert action["env"] == {"OPENAI_API_KEY": "${{ secrets.OPENAI_API_KEY }}"}


PYPROJECT = """\
[project]
name = "demo"   # keep this comment

[tool.pytest.ini_options]
# the user's own comment
addopts = "-ra"
markers = [
    "slow: slow tests",
]

[tool.ruff]
line-length = 99
"""


def test_edits_pyproject_minimally(project: Path) -> None:
    write(project / "pyproject.toml", PYPROJECT)
    code, _, _ = run_init(project)
    assert code == 0
    text = (project / "pyproject.toml").read_text(encoding="utf-8")
    assert text == PYPROJECT.replace(
        '    "slow: slow tests",\n]\n', '    "slow: slow tests",\n]\nevolve_rounds = "10"\n')
    assert not (project / "pytest.ini").exists()


@pytest.mark.parametrize(("name", "header"), [("tox.ini", "[pytest]"),
                                               ("setup.cfg", "[tool:pytest]")])
def test_uses_the_ini_file_the_project_has(project: Path, name: str, header: str) -> None:
    original = (f"[flake8]\nmax-line-length = 99\n\n{header}\ntestpaths =\n    tests\n\n"
                "[other]\nx = 1\n")
    write(project / name, original)
    code, out, _ = run_init(project)
    assert code == 0, out
    expected = original.replace("    tests\n", "    tests\nevolve_rounds = 10\n")
    assert (project / name).read_text(encoding="utf-8") == expected
    assert not (project / "pytest.ini").exists()


def test_refuses_to_overwrite_without_force(project: Path) -> None:
    write(project / "pytest.ini", "[pytest]\nevolve_rounds = 3\n")
    write(project / ".github/workflows/agentdescent.yml", "name: mine\n")
    code, _, err = run_init(project)
    assert code == 1
    assert ".github/workflows/agentdescent.yml exists" in err
    assert "evolve_rounds already set in pytest.ini" in err
    assert "--force" in err
    # Nothing was written.
    assert (project / ".github/workflows/agentdescent.yml").read_text() == "name: mine\n"
    assert (project / "pytest.ini").read_text() == "[pytest]\nevolve_rounds = 3\n"

    code, _, _ = run_init(project, "--force", "--rounds", "7")
    assert code == 0
    assert (project / "pytest.ini").read_text() == "[pytest]\nevolve_rounds = 7\n"
    assert "agentdescent" in yaml.safe_load(
        (project / ".github/workflows/agentdescent.yml").read_text())["name"]


def test_missing_artifact_root_and_bad_options(project: Path) -> None:
    code, _, err = run_init(project, "--paths", "prompts/")
    assert code == 1
    assert "prompts/ does not exist" in err
    code, _, err = run_init(project, "--schedule", "every day")
    assert code == 2
    assert "--schedule" in err
    code, _, err = run_init(project, "--model", "gpt-4")
    assert code == 2
    assert "anthropic:MODEL or openai:MODEL" in err
    assert not (project / ".github").exists()


def test_several_roots_and_a_file_root(project: Path) -> None:
    code, _, err = run_init(project, "--paths", "skills/greet", "--paths", "AGENTS.md")
    assert code == 0
    assert "secret" not in err  # no --model: the conftest hook proposes, no key is needed
    assert "agentdescent check skills/greet/ AGENTS.md" in err
    flow = yaml.safe_load((project / ".github/workflows/agentdescent.yml").read_text())
    action = next(s for s in flow["jobs"]["evolve"]["steps"] if s.get("id") == "agentdescent")
    assert action["with"]["paths"] == "skills/greet/ AGENTS.md"


def test_find_inifile_follows_pytests_order(tmp_path: Path) -> None:
    write(tmp_path / "setup.cfg", "[tool:pytest]\n")
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")  # no pytest table
    assert find_inifile(tmp_path) == IniFile(tmp_path / "setup.cfg", "tool:pytest")
    write(tmp_path / "tox.ini", "[pytest]\n")
    assert find_inifile(tmp_path) == IniFile(tmp_path / "tox.ini", "pytest")
    write(tmp_path / "pyproject.toml", "[tool.pytest]\nminversion = '9.0'\n")
    assert find_inifile(tmp_path) == IniFile(tmp_path / "pyproject.toml", "tool.pytest")
    write(tmp_path / "pytest.ini", "")
    assert find_inifile(tmp_path) == IniFile(tmp_path / "pytest.ini", "pytest")
    sub = tmp_path / "pkg" / "deep"
    sub.mkdir(parents=True)
    assert find_inifile(sub) == IniFile(tmp_path / "pytest.ini", "pytest")
    assert find_inifile(sub, stop=sub) is None


def test_set_keys_native_toml_table_and_replacing_a_multiline_value(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    write(path, '[tool.pytest]\nevolve_paths = [\n  "a/",\n  "b/",\n]\nx = 1\n')
    ini = IniFile(path, "tool.pytest")
    assert set_keys(ini, {"evolve_paths": ["skills/"]}, force=False) == ([], ["evolve_paths"])
    written, present = set_keys(ini, {"evolve_paths": ["skills/"]}, force=True)
    assert (written, present) == (["evolve_paths"], ["evolve_paths"])
    assert path.read_text() == '[tool.pytest]\nevolve_paths = ["skills/"]\nx = 1\n'
    assert ini.paths("evolve_paths") == ["skills/"]


def test_docs_show_the_workflow_init_writes() -> None:
    from pytest_agentdescent.cli.init import DEFAULT_SCHEDULE, render_workflow

    doc = (Path(__file__).resolve().parents[1] / "docs" / "ci.md").read_text(encoding="utf-8")
    shown = doc.split("The workflow it writes, in full:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    assert shown == render_workflow(paths=["skills/"], schedule=DEFAULT_SCHEDULE,
                                    model="anthropic:claude-sonnet-4-5")


CONFIGS = {
    # file: (content with a comment, the section init must write into)
    "pytest.ini": ("[pytest]\n# keep me\ntestpaths = tests\n", "pytest"),
    "tox.ini": ("[tox]\nenvlist = py\n\n[pytest]\n# keep me\ntestpaths = tests\n", "pytest"),
    "setup.cfg": ("[metadata]\nname = x\n\n[tool:pytest]\n# keep me\ntestpaths = tests\n",
                  "tool:pytest"),
    "pyproject.toml": ('[project]\nname = "x"\n\n[tool.pytest.ini_options]\n# keep me\n'
                       'testpaths = ["tests"]\n', "tool.pytest.ini_options"),
    "pyproject.toml native": ('[project]\nname = "x"\n\n[tool.pytest]\n# keep me\n'
                              'testpaths = ["tests"]\n', "tool.pytest"),
    "pytest.toml": ('[pytest]\n# keep me\ntestpaths = ["tests"]\n', "pytest"),
}

READ_BACK = '''\
def pytest_report_header(config):
    return f"rounds={config.getini('evolve_rounds')!r} model={config.getini('evolve_model')!r}"
'''


@pytest.mark.parametrize("shape", list(CONFIGS))
def test_init_writes_keys_pytest_then_reads(project: Path, shape: str) -> None:
    """Every config shape pytest 9 reads: init writes there, pytest loads it, comments stay."""
    import subprocess
    import sys

    name = shape.split(" ")[0]
    content, section = CONFIGS[shape]
    for other in ("pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "pytest.toml"):
        (project / other).unlink(missing_ok=True)
    write(project / name, content)
    write(project / "conftest.py", READ_BACK)

    code, out, err = run_init(project, "--rounds", "3", "--model", "openai:gpt-5")

    assert code == 0, out + err
    assert f"in {name} [{section}]" in out
    text = (project / name).read_text(encoding="utf-8")
    assert "# keep me" in text
    assert not (project / "pytest.ini").exists() or name == "pytest.ini"
    ran = subprocess.run([sys.executable, "-m", "pytest", "--co", "-p", "no:cacheprovider",
                          "-p", "no:randomly"], cwd=project, capture_output=True, text=True,
                         check=False, timeout=120)
    assert ran.returncode in (0, 5), ran.stdout + ran.stderr  # 4 would be a config error
    assert "rounds=3 model='openai:gpt-5'" in ran.stdout, ran.stdout + ran.stderr


def test_pytest_toml_comes_before_pytest_ini(tmp_path: Path) -> None:
    write(tmp_path / "pytest.ini", "[pytest]\n")
    write(tmp_path / ".pytest.toml", "")  # empty: pytest still takes it
    assert find_inifile(tmp_path) == IniFile(tmp_path / ".pytest.toml", "pytest")
    write(tmp_path / "pytest.toml", "[pytest]\n")
    assert find_inifile(tmp_path) == IniFile(tmp_path / "pytest.toml", "pytest")


# ---------------------------------------------------------------- caches across sessions

def _steps(project: Path) -> list[dict[str, Any]]:
    flow = yaml.safe_load((project / ".github/workflows/agentdescent.yml").read_text())
    steps: list[dict[str, Any]] = flow["jobs"]["evolve"]["steps"]
    return steps


def _cached(step: dict[str, Any]) -> list[str]:
    return str(step["with"]["path"]).split()


def test_the_workflow_restores_the_caches_before_the_action_and_saves_them_after(
        project: Path) -> None:
    from pytest_agentdescent.cli.init import (
        CACHE_ACTION,
        CACHE_ACTION_SHA,
        CACHED_FILES,
        frozen_globs,
    )
    from pytest_agentdescent.cli.project import DEFAULT_STATE_DIR

    write(project / "pytest.ini", "[pytest]\npython_files = check_*.py\n"
                                  "evolve_frozen = skills/*/LICENSE\n")
    code, out, err = run_init(project, "--force")
    assert code == 0, out + err
    steps = _steps(project)
    names = [s.get("id") or s.get("name") or s["uses"] for s in steps]
    restore = steps[names.index("agentdescent-cache")]
    action = names.index("agentdescent")
    assert names.index("agentdescent-cache") < action
    save = next(s for s in steps[action + 1:] if "save@" in s.get("uses", ""))

    # pinned by commit, the version beside it, as action.yml pins setup-python
    assert restore["uses"] == f"{CACHE_ACTION}/restore@{CACHE_ACTION_SHA}"
    assert save["uses"] == f"{CACHE_ACTION}/save@{CACHE_ACTION_SHA}"
    assert len(CACHE_ACTION_SHA) == 40
    assert int(CACHE_ACTION_SHA, 16) >= 0
    text = (project / ".github/workflows/agentdescent.yml").read_text()
    assert f"@{CACHE_ACTION_SHA}  # v" in text

    # exactly the cache files, under the state directory, in both steps
    expected = [f"{DEFAULT_STATE_DIR}/{name}" for name in CACHED_FILES]
    assert _cached(restore) == _cached(save) == expected
    assert save["if"].startswith("always()")

    # the key: the OS, the frozen files' hash, then the run (a key is immutable);
    # restored only from the same OS and frozen hash, never from another hash
    key, (restore_key,) = restore["with"]["key"], restore["with"]["restore-keys"].split("\n")[:1]
    globs = frozen_globs(["check_*.py"], ["skills/*/LICENSE"])
    hashed = "${{ hashFiles(" + ", ".join(f"'{g}'" for g in globs) + ") }}"
    assert restore_key == "agentdescent-${{ runner.os }}-" + hashed + "-"
    assert key == restore_key + "${{ github.run_id }}-${{ github.run_attempt }}"
    assert restore["with"]["restore-keys"].strip() == restore_key
    assert save["with"]["key"] == "${{ steps.agentdescent-cache.outputs.cache-primary-key }}"
    for glob in ("**/conftest.py", "**/check_*.py", "**/pytest.ini", "**/pyproject.toml",
                 "skills/*/LICENSE"):
        assert f"'{glob}'" in hashed
    assert "'**/test_*.py'" not in hashed  # the project's python_files replace pytest's
    # no secret and no other part of the state directory travels
    assert "secrets." not in str(restore) + str(save)


def test_frozen_globs_cover_the_frozen_set_by_default() -> None:
    from agentdescent_core.governance import ALWAYS_FROZEN_PATTERNS
    from pytest_agentdescent.cli.inifile import _CANDIDATES
    from pytest_agentdescent.cli.init import frozen_globs

    globs = frozen_globs()
    assert set(ALWAYS_FROZEN_PATTERNS) <= set(globs)
    assert {"**/test_*.py", "**/*_test.py"} <= set(globs)
    assert {f"**/{name}" for name, _ in _CANDIDATES} <= set(globs)
    # a negated glob would drop files from the hash: it is not passed on
    assert "!skills/keep.md" not in frozen_globs(frozen=["!skills/keep.md", "a/*.md"])
    assert "a/*.md" in frozen_globs(frozen=["!skills/keep.md", "a/*.md"])
    assert len(globs) == len(set(globs))


def test_the_cached_paths_are_where_a_run_writes_its_caches(tmp_path: Path) -> None:
    """A real run (baseline only, model cache on) writes exactly the files the workflow keeps."""
    from test_model_runs import NO_HOOK, model_env, run
    from test_session_runs import make_agent_repo

    repo = tmp_path / "agent"
    make_agent_repo(repo, proposer=NO_HOOK, ini="evolve_state_dir = build/ad-state\n")
    code, out, err = run_init(repo, "--paths", "skills/", "--force")
    assert code == 0, out + err
    restore = next(s for s in _steps(repo) if s.get("id") == "agentdescent-cache")
    paths = _cached(restore)
    assert all(p.startswith("build/ad-state/") for p in paths)

    dead = model_env(None, base_url="http://127.0.0.1:9/v1")  # no round: nothing is asked
    result = run(repo, dead, "--evolve-llm-cache", "read-through", "--evolve-rounds", "0",
                 "--evolve-dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    for path in paths:
        assert (repo / path).is_file(), path
    state = repo / "build/ad-state"
    written = {p.relative_to(repo).as_posix() for p in state.iterdir()
               if "cache" in p.name and not p.name.endswith(("-wal", "-shm"))}
    assert written == set(paths)
