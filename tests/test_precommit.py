"""The pre-commit hooks (.pre-commit-hooks.yaml), run by pre-commit itself.

``pre-commit try-repo`` installs this project (a fresh clone of the working
tree) into pre-commit's own virtualenv, as a user's ``.pre-commit-config.yaml``
would, and runs a hook against an example repository.  The virtualenv is built
once per test session (``PRE_COMMIT_HOME`` is shared) and reused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import USER_ENV, clone_working_tree, user_git, write

from pytest_agentdescent.cli.precommit import configured_roots, main, touched_roots

ROOT = Path(__file__).resolve().parents[1]
PRE_COMMIT = [sys.executable, "-m", "pre_commit"]

#: One xdist worker runs them all (``--dist loadgroup``), so the hook environment is
#: built once per session rather than once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pre-commit")]


@pytest.fixture(scope="session")
def hook_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a clone of this project, the PRE_COMMIT_HOME its environment is cached in)."""
    base = tmp_path_factory.mktemp("pre-commit")
    return clone_working_tree(ROOT, base / "project"), base / "home"


def example_repo(path: Path, *, evolve_paths: str = "skills/") -> Path:
    """The support-bot example as a user's repository whose ini names the artifact roots."""
    shutil.copytree(ROOT / "examples" / "support-bot", path,
                    ignore=shutil.ignore_patterns("__pycache__", ".agentdescent"))
    ini = (path / "pytest.ini").read_text(encoding="utf-8")
    (path / "pytest.ini").write_text(ini + f"evolve_paths = {evolve_paths}\n", encoding="utf-8")
    user_git(path.parent, "init", "--quiet", "--initial-branch=main", str(path))
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "the bot")
    return path


def try_repo(hook_home: tuple[Path, Path], repo: Path, *args: str
             ) -> subprocess.CompletedProcess[str]:
    project, home = hook_home
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), **USER_ENV)
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([*PRE_COMMIT, "try-repo", str(project), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def test_manifest_is_valid() -> None:
    done = subprocess.run([*PRE_COMMIT, "validate-manifest", str(ROOT / ".pre-commit-hooks.yaml")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    hooks = {hook["id"]: hook for hook in
             yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    check, dry_run = hooks["agentdescent-check"], hooks["agentdescent-dry-run"]
    assert check["stages"] == ["pre-commit"]
    assert check["pass_filenames"] is False
    assert check["entry"] == "agentdescent check"
    assert sorted(dry_run["stages"]) == ["manual", "pre-push"]
    assert dry_run["pass_filenames"] is True
    assert {check["language"], dry_run["language"]} == {"python"}


def test_check_hook_passes_on_a_sound_repository_and_fails_on_a_test_in_a_root(
        hook_home: tuple[Path, Path], tmp_path: Path) -> None:
    repo = example_repo(tmp_path / "bot")
    done = try_repo(hook_home, repo, "agentdescent-check", "--all-files")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "agentdescent check" in done.stdout
    assert "Passed" in done.stdout

    write(repo / "skills/tone/test_tone.py", "def test_tone():\n    assert True\n")
    user_git(repo, "add", "-A")
    done = try_repo(hook_home, repo, "agentdescent-check", "--all-files")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "Failed" in done.stdout
    assert "skills/tone/test_tone.py" in done.stdout


def test_dry_run_hook_evolves_only_when_a_root_changed(
        hook_home: tuple[Path, Path], tmp_path: Path) -> None:
    repo = example_repo(tmp_path / "bot")
    refs_before = user_git(repo, "for-each-ref")
    done = try_repo(hook_home, repo, "agentdescent-dry-run", "--hook-stage", "manual",
                    "--verbose", "--files", "README.md")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "no artifact root changed" in done.stdout

    done = try_repo(hook_home, repo, "agentdescent-dry-run", "--hook-stage", "manual",
                    "--verbose", "--files", "skills/refunds/SKILL.md")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "agentdescent run skills --dry-run --rounds 1" in done.stdout
    assert "reward" in done.stdout
    assert user_git(repo, "for-each-ref") == refs_before  # a dry run moves no ref


def test_touched_roots_maps_files_to_roots(tmp_path: Path) -> None:
    roots = ["skills/greet", "AGENTS.md", "prompts/"]
    files = ["skills/greet/SKILL.md", "skills/greeting.md", "src/app.py", "AGENTS.md"]
    assert touched_roots(roots, files, tmp_path) == ["skills/greet", "AGENTS.md"]
    assert touched_roots(roots, ["prompts/a/b.txt"], tmp_path) == ["prompts/"]
    assert touched_roots(roots, [], tmp_path) == []


def test_roots_come_from_the_ini_relative_to_it(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "tox.ini", "[pytest]\nevolve_paths = skills/ AGENTS.md\n")
    (tmp_path / "sub").mkdir()
    assert configured_roots(tmp_path) == ["skills", "AGENTS.md"]
    assert configured_roots(tmp_path / "sub") == [os.path.join("..", "skills"), "../AGENTS.md"]
    monkeypatch.chdir(tmp_path)
    assert main(["src/app.py"]) == 0  # no root touched: nothing runs


def test_no_roots_anywhere_is_a_clear_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["skills/a.md"]) == 1
    assert "args: [--root, skills/]" in capsys.readouterr().err
