"""Real projects' suites in the workspace: generated ignored modules, tests that write files.

Two things plain ``pytest`` allows that the sandboxed run must allow too
(issue 15): importing a git-ignored file generated at install time (a
hatch-vcs ``_version.py``, an extension built in place), and tests that write
new files into the repository.  Each test builds a fresh git repository, runs
plain ``pytest`` where the comparison matters, and evaluates the same tests in
the workspace under every backend available here; secrets (an ignored
``.env``) must still never reach the copy, what tests leave must be gone at the
next run, and a committed frozen file must stay protected.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import snapshot, user_git, write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.journal import CHILD_ENV
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.workspace import MAX_PROTECTED_FILES, Violation, Workspace

SKILL = "skills/s/SKILL.md"

VERSION_TESTS = '''\
import pathlib

import pytest

import pkg

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve
def test_version():
    assert pkg.VERSION == "1.2.3"


@pytest.mark.evolve
def test_skill():
    assert (ROOT / "skills/s/SKILL.md").read_text().startswith("# Skill")
'''

WRITER_TESTS = '''\
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve
def test_writes_at_the_root():
    with open(ROOT / "out.txt", "w") as handle:
        handle.write("result")
    assert (ROOT / "out.txt").read_text() == "result"


@pytest.mark.evolve
def test_writes_a_folder_and_next_to_itself():
    (ROOT / "tmp").mkdir(exist_ok=True)
    (ROOT / "tmp" / "data.bin").write_bytes(b"x" * 100)
    (ROOT / "tests" / "scratch.json").write_text("{}")
    assert sorted(os.listdir(ROOT / "tmp")) == ["data.bin"]
'''

#: Fails when an earlier run left its file: the workspace must start clean every run.
FRESH_TEST = '''\
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve
def test_leaves_a_file_once():
    left = ROOT / "left-behind.txt"
    assert not left.exists(), "an earlier run's file is still there"
    left.write_text("x")
'''

TRACKED_WRITE_TEST = '''\
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve
def test_rewrites_committed_data():
    try:
        (ROOT / "data.txt").write_text("changed")
    except OSError as exc:
        print("write refused:", type(exc).__name__)
'''


def commit_all(repo: Path) -> str:
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "suite")
    return user_git(repo, "rev-parse", "HEAD")


def new_repo(path: Path, tests: dict[str, str], *, ignore: str = "") -> Path:
    user_git(path.parent, "init", "--quiet", "--initial-branch=main", path.name)
    write(path / SKILL, "# Skill\n\nDo it.\n")
    write(path / "pytest.ini", "[pytest]\npythonpath = .\n")
    write(path / ".gitignore", ignore)
    for name, text in tests.items():
        write(path / name, text)
    return path


def version_repo(path: Path) -> tuple[Path, str]:
    """A package whose ``__init__`` imports a git-ignored, generated ``_version.py``."""
    repo = new_repo(path, {"tests/test_version.py": VERSION_TESTS},
                    ignore="_version.py\n.env\n*.so\n.venv/\n")
    write(repo / "pkg/__init__.py", "from pkg._version import VERSION\n")
    commit = commit_all(repo)
    # Generated at install time, never committed; plus what must never be copied.
    write(repo / "pkg/_version.py", 'VERSION = "1.2.3"\n')
    write(repo / ".env", "API_TOKEN=not-for-candidates\n")
    write(repo / ".venv/lib/site.py", "raise SystemExit('the virtualenv was copied')\n")
    return repo, commit


def plain_pytest(repo: Path) -> str:
    """The ``evolve: N tasks, reward R`` line of a plain ``pytest`` run in ``repo``."""
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    found = re.search(r"evolve: \d+ tasks?, reward [0-9.]+", done.stdout)
    assert found, done.stdout + done.stderr
    return found.group(0)


def tree_and_frozen() -> tuple[FileTree, FrozenSet]:
    tree = FileTree(["skills"])
    return tree, FrozenSet(artifact_roots=tree.roots)


@pytest.fixture(params=ALL_BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    require_backend(str(request.param))
    return str(request.param)


def verifier_for(repo: Path, commit: str, tasks: tuple[str, ...], backend: str,
                 tmp_path: Path) -> SandboxedVerifier:
    tree, frozen = tree_and_frozen()
    return SandboxedVerifier(
        repo, commit, TaskSplit(train=tasks), tree=tree, frozen=frozen,
        backend=require_backend(backend), cache=None,
        network="default" if backend == "local" else "none",
        workspace_parent=tmp_path / "workspaces", test_timeout=60.0, run_timeout=240.0,
        pytest_args=child_pytest_args(),
    )


def state(text: str = "# Skill\n\nDo it.\n") -> dict[str, str]:
    return {SKILL: text}


@pytest.fixture
def version(tmp_path: Path) -> tuple[Path, str]:
    return version_repo(tmp_path / "repo")


# ---------------------------------------------------------------- which ignored files come in


def test_ignored_modules_are_copied_frozen_and_secrets_are_not(
    version: tuple[Path, str], tmp_path: Path
) -> None:
    repo, commit = version
    write(repo / "pkg/_speedups.cpython-312-x86_64-linux-gnu.so", "\x7fELF fake\n")
    write(repo / "pkg/_keys.py", "TOKEN = 'ghp_" + "A1" * 18 + "'\n")  # a credential inside
    write(repo / "pkg/secret_settings.py", "X = 1\n")
    write(repo / "build/lib/pkg/_speedups.so", "\x7fELF build copy\n")
    write(repo / "notes.log", "ignored, not importable\n")
    user_git(repo, "config", "core.excludesFile", os.devnull)
    (repo / ".git/info/exclude").write_text("*.log\npkg/_keys.py\npkg/secret_settings.py\n"
                                            "build/\n")
    before = snapshot(repo)
    tree, frozen = tree_and_frozen()
    with Workspace.create(repo, commit, tree=tree, frozen=frozen,
                          parent=tmp_path / "ws") as ws:
        assert ws.ignored_files == ["pkg/_speedups.cpython-312-x86_64-linux-gnu.so",
                                    "pkg/_version.py"]
        assert (ws.root / "pkg/_version.py").read_text() == 'VERSION = "1.2.3"\n'
        for absent in (".env", ".venv", "build", "notes.log", "pkg/_keys.py",
                       "pkg/secret_settings.py"):
            assert not (ws.root / absent).exists(), absent
        skipped = dict(ws.ignored_skipped)
        assert "credential" in skipped["pkg/_keys.py"]
        assert "secret" in skipped["pkg/secret_settings.py"]

        # Frozen: a run that rewrites the copy is caught, and the reset restores it.
        ws.reset(state())
        ws.new_run_scratch()
        (ws.root / "pkg/_version.py").write_text('VERSION = "9.9.9"\n')
        assert ws.check().violations == [Violation("pkg/_version.py", "modified")]
        ws.reset(state())
        assert (ws.root / "pkg/_version.py").read_text() == 'VERSION = "1.2.3"\n'
        ws.new_run_scratch()
        (ws.root / "pkg/_version.py").unlink()
        assert ws.check().violations == [Violation("pkg/_version.py", "removed")]
        ws.reset(state())
        assert (ws.root / "pkg/_version.py").read_text() == 'VERSION = "1.2.3"\n'
        first_hash = ws.frozen_tree_hash
    assert snapshot(repo) == before  # the working tree, index and HEAD were only read

    # Another generated version is another frozen tree: no cached result is reused for it.
    write(repo / "pkg/_version.py", 'VERSION = "1.2.4"\n')
    with Workspace.create(repo, commit, tree=tree, frozen=frozen, parent=tmp_path / "ws") as ws:
        assert ws.frozen_tree_hash != first_hash
    (repo / "pkg/_version.py").unlink()
    with Workspace.create(repo, commit, tree=tree, frozen=frozen, parent=tmp_path / "ws") as ws:
        assert ws.ignored_files == ["pkg/_speedups.cpython-312-x86_64-linux-gnu.so"]


def test_an_ignored_symlink_or_file_in_the_artifact_is_not_copied(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {}, ignore="*.py\n")
    write(repo / "tests/test_x.py", "def test_x():\n    pass\n")
    user_git(repo, "add", "-f", "tests/test_x.py")
    commit = commit_all(repo)
    outside = tmp_path / "elsewhere.py"
    outside.write_text("SECRET = 1\n")
    (repo / "linked.py").symlink_to(outside)
    write(repo / "skills/s/generated.py", "X = 1\n")
    tree, frozen = tree_and_frozen()
    with Workspace.create(repo, commit, tree=tree, frozen=frozen, parent=tmp_path / "ws") as ws:
        assert ws.ignored_files == []
        assert not (ws.root / "linked.py").exists()
        assert not (ws.root / "skills/s/generated.py").exists()
        assert "artifact" in dict(ws.ignored_skipped)["skills/s/generated.py"]


def test_the_generated_version_module_scores_as_plain_pytest(
    version: tuple[Path, str], backend_name: str, tmp_path: Path
) -> None:
    repo, commit = version
    assert plain_pytest(repo) == "evolve: 2 tasks, reward 1.000"
    tasks = ("tests/test_version.py::test_version", "tests/test_version.py::test_skill")
    verifier = verifier_for(repo, commit, tasks, backend_name, tmp_path)
    try:
        samples = verifier.evaluate(state(), list(tasks), 1)
        assert verifier.candidate_error(state()) is None
        assert samples.rewards == {task: (1.0,) for task in tasks}
    finally:
        verifier.close()


def test_an_ignored_env_file_is_not_in_the_workspace(
    version: tuple[Path, str], backend_name: str, tmp_path: Path
) -> None:
    repo, _ = version
    write(repo / "tests/test_env.py",
          "import pathlib\nimport pytest\n\n\n@pytest.mark.evolve\ndef test_no_env():\n"
          "    root = pathlib.Path(__file__).resolve().parents[1]\n"
          "    assert not (root / '.env').exists()\n"
          "    assert not (root / '.venv').exists()\n")
    commit = commit_all(repo)
    task = "tests/test_env.py::test_no_env"
    verifier = verifier_for(repo, commit, (task,), backend_name, tmp_path)
    try:
        samples = verifier.evaluate(state(), [task], 1)
        shown = [r.message for r in verifier.records(state(), task)]
        assert samples.rewards == {task: (1.0,)}, shown
    finally:
        verifier.close()


# ---------------------------------------------------------------- what tests may write


def test_tests_that_write_into_the_repository_score_as_plain_pytest(
    backend_name: str, tmp_path: Path
) -> None:
    repo = new_repo(tmp_path / "repo", {"tests/test_writer.py": WRITER_TESTS})
    commit = commit_all(repo)
    assert plain_pytest(repo) == "evolve: 2 tasks, reward 1.000"
    tasks = ("tests/test_writer.py::test_writes_at_the_root",
             "tests/test_writer.py::test_writes_a_folder_and_next_to_itself")
    verifier = verifier_for(repo, commit, tasks, backend_name, tmp_path)
    try:
        samples = verifier.evaluate(state(), list(tasks), 1)
        shown = [r.message for t in tasks for r in verifier.records(state(), t)]
        assert verifier.disqualification(state()) is None
        assert samples.rewards == {task: (1.0,) for task in tasks}, shown
    finally:
        verifier.close()


def test_what_a_run_leaves_is_gone_at_the_next_run(backend_name: str, tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {"tests/test_fresh.py": FRESH_TEST})
    commit = commit_all(repo)
    task = "tests/test_fresh.py::test_leaves_a_file_once"
    verifier = verifier_for(repo, commit, (task,), backend_name, tmp_path)
    try:
        for n in range(3):  # three candidates, one workspace: each run starts clean
            candidate = state(f"# Skill\n\nDo it, take {n}.\n")
            samples = verifier.evaluate(candidate, [task], 1)
            shown = [r.message for r in verifier.records(candidate, task)]
            assert samples.rewards == {task: (1.0,)}, (n, shown)
            assert verifier.disqualification(candidate) is None
    finally:
        verifier.close()
    assert not (repo / "left-behind.txt").exists()  # the user's tree never saw it


def test_a_write_to_a_tracked_frozen_file_is_still_refused(
    backend_name: str, tmp_path: Path
) -> None:
    repo = new_repo(tmp_path / "repo", {"tests/test_tracked.py": TRACKED_WRITE_TEST})
    write(repo / "data.txt", "committed\n")
    commit = commit_all(repo)
    task = "tests/test_tracked.py::test_rewrites_committed_data"
    verifier = verifier_for(repo, commit, (task,), backend_name, tmp_path)
    try:
        samples = verifier.evaluate(state(), [task], 1)
        refusal = verifier.disqualification(state())
        if backend_name == "local":  # nothing stops the write: caught after the run
            assert refusal is not None
            assert refusal.category == "frozen-violation"
            assert "data.txt (modified)" in str(refusal)
            assert "the tests themselves" in str(refusal)
            assert samples.reward() == 0.0
        else:  # bound read-only: the write fails, the committed file is untouched
            assert refusal is None, refusal
            output = verifier.records(state(), task)[0].output
            assert "write refused: OSError" in output
        # The next run sees the committed bytes again, whatever happened.
        again = state("# Skill\n\nAgain.\n")
        verifier.evaluate(again, [task], 1)
        workspace = verifier._workspaces[0]
        assert (workspace.root / "data.txt").read_text() == "committed\n"
    finally:
        verifier.close()
    assert (repo / "data.txt").read_text() == "committed\n"


def test_a_committed_file_past_the_bound_ones_is_verified(
    backend_name: str, tmp_path: Path
) -> None:
    """More frozen files than a sandbox binds read-only: a rewrite of the others is caught."""
    repo = new_repo(tmp_path / "repo", {"tests/test_tracked.py": TRACKED_WRITE_TEST.replace(
        '"data.txt"', '"data/f99.txt"')})
    for n in range(MAX_PROTECTED_FILES + 36):
        write(repo / f"data/f{n}.txt", f"{n}\n")
    commit = commit_all(repo)
    task = "tests/test_tracked.py::test_rewrites_committed_data"
    verifier = verifier_for(repo, commit, (task,), backend_name, tmp_path)
    try:
        samples = verifier.evaluate(state(), [task], 1)
        refusal = verifier.disqualification(state())
        assert refusal is not None
        assert "data/f99.txt (modified)" in str(refusal)
        assert samples.reward() == 0.0
        verifier.evaluate(state("# Skill\n\nAgain.\n"), [task], 1)
        workspace = verifier._workspaces[0]
        assert (workspace.root / "data/f99.txt").read_text() == "99\n"
    finally:
        verifier.close()


def test_a_new_module_or_conftest_left_by_a_run_is_a_violation(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", {"tests/test_x.py": "def test_x():\n    pass\n"})
    commit = commit_all(repo)
    tree, frozen = tree_and_frozen()
    with Workspace.create(repo, commit, tree=tree, frozen=frozen, parent=tmp_path / "ws") as ws:
        ws.reset(state())
        ws.new_run_scratch()
        root = ws.root
        (root / "out.txt").write_text("fine")
        (root / "tmp/deep").mkdir(parents=True)
        (root / "tmp/deep/f.bin").write_bytes(b"fine")
        (root / "tests/.coverage").write_text("fine")
        (root / "yaml.py").write_text("shadow = True\n")
        (root / "tests/conftest.py").write_text("import os\n")
        (root / "pytest.toml").write_text("[pytest]\n")
        (root / "helper").symlink_to(root / "skills")
        result = ws.check()
        assert result.written == ["out.txt", "tests/.coverage", "tmp", "tmp/deep",
                                  "tmp/deep/f.bin"]
        assert result.violations == [Violation("helper", "added"),
                                     Violation("pytest.toml", "added"),
                                     Violation("tests/conftest.py", "added"),
                                     Violation("yaml.py", "added")]
        ws.reset(state())
        for gone in ("out.txt", "tmp", "tests/.coverage", "yaml.py", "helper"):
            assert not os.path.lexists(root / gone), gone
        ws.new_run_scratch()
        (root / "out.txt").write_text("again")
        assert ws.check().ok


# ---------------------------------------------------------------- as a user runs it


@pytest.mark.slow
def test_pytest_evolve_baseline_matches_plain_pytest(backend_name: str, tmp_path: Path) -> None:
    """The issue's reproduction: ``--evolve-rounds 0 --evolve-dry-run`` against plain pytest."""
    repo, _ = version_repo(tmp_path / "repo")
    write(repo / "tests/test_writer.py", WRITER_TESTS)
    write(repo / "conftest.py", "def pytest_evolve_propose(context):\n    return None\n")
    commit_all(repo)
    assert plain_pytest(repo) == "evolve: 4 tasks, reward 1.000"
    env = {k: v for k, v in os.environ.items() if k != CHILD_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--evolve", "skills",
         "--evolve-rounds", "0", "--evolve-dry-run", "--evolve-sandbox", backend_name],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600, check=False)
    shown = done.stdout + done.stderr
    assert re.search(r"^baseline\s+reward 1\.000\b", done.stdout, re.M), shown
    assert "changes frozen files" not in shown
    assert "do not run in the sandboxed" not in shown
