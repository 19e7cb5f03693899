"""Shared fixtures: a realistic user repository for the ledger tests, and its snapshot.

``user_repo`` builds a real git repository in tmp_path the way a user's checkout
looks mid-work: committed artifact folders, tests and code, a second branch and
a tag, plus a modified tracked file, a staged change, untracked files and ignored
files.  ``UserRepo.snapshot()`` fingerprints everything the ledger promises not to
touch, so a test can assert it is byte-for-byte unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

#: The pytest runs the tests start (and, since ``pytest --evolve`` passes the ``-p``
#: options of ``PYTEST_ADDOPTS`` on, every child of theirs) leave out the plugins of this
#: environment that no repository of the tests uses: hypothesis' import alone is about
#: two thirds of a child's start, platformdirs' plugin another 60 ms of the 0.4 s left
#: (measured 2026-12-05).  A test that wants them drops the variable
#: (``test_session_runs.evolve(every_plugin=True)``).
os.environ.setdefault(
    "PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:anyio -p no:benchmark -p no:platformdirs")

#: Setup commands of the tests run as this made-up user, with no machine config.
USER_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Test User",
    "GIT_AUTHOR_EMAIL": "user@example.com",
    "GIT_COMMITTER_NAME": "Test User",
    "GIT_COMMITTER_EMAIL": "user@example.com",
}


def user_git(path: Path | str, *args: str) -> str:
    """Run ``git <args>`` in ``path`` as the user would (porcelain allowed)."""
    out = git.Git(str(path)).execute(["git", *args], env=USER_ENV)
    return out if isinstance(out, str) else str(out)


def write(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


SKILL_TEXT = "# Greet\n\nSay hello.\nUse the user's name.\nBe brief.\nEnd politely.\n"


def snapshot(repo_dir: Path | str, prefix: str = "agentdescent/") -> dict[str, str]:
    """Hash of every file and directory the ledger must leave alone.

    Everything under the repository directory counts — working tree, untracked
    and ignored files, ``.git/index``, ``.git/HEAD``, config, hooks, other refs,
    ``packed-refs``, ``logs/HEAD`` — except the object database (new objects are
    expected) and the refs and reflogs of the ledger's own prefix.
    """
    root = Path(repo_dir)
    skipped = {
        Path(".git/objects"),
        Path(".git/refs/heads") / prefix.rstrip("/"),
        Path(".git/logs/refs/heads") / prefix.rstrip("/"),
    }
    result: dict[str, str] = {}
    for current, dirs, files in os.walk(root):
        rel_dir = Path(current).relative_to(root)
        dirs[:] = sorted(d for d in dirs if rel_dir / d not in skipped)
        for name in dirs:
            result[str(rel_dir / name) + "/"] = "dir"
        for name in sorted(files):
            full = Path(current) / name
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                digest = "link:" + os.readlink(full)
            else:
                digest = hashlib.sha256(full.read_bytes()).hexdigest()
            result[str(rel_dir / name)] = f"{oct(st.st_mode)}:{digest}"
    return result


@dataclass
class UserRepo:
    path: Path
    repo: git.Repo
    base: str

    def git(self, *args: str) -> str:
        return user_git(self.path, *args)

    def snapshot(self, prefix: str = "agentdescent/") -> dict[str, str]:
        return snapshot(self.path, prefix)

    def head_state(self) -> tuple[str, str]:
        """(what .git/HEAD says, the sha HEAD resolves to)."""
        head_file = (self.path / ".git" / "HEAD").read_text(encoding="utf-8").strip()
        return head_file, self.git("rev-parse", "HEAD")

    def other_refs(self, prefix: str = "agentdescent/") -> dict[str, str]:
        out = self.git("for-each-ref", "--format=%(refname) %(objectname)")
        pairs = (line.split(" ", 1) for line in out.splitlines() if line.strip())
        return {ref: sha for ref, sha in pairs if not ref.startswith(f"refs/heads/{prefix}")}

    def commit_on_main(self, files: dict[str, str | None], message: str) -> str:
        """Move the base branch like a user would: a normal commit on ``main``.

        The working-tree extras made by the fixture are stashed around it so the
        user's in-progress work survives, as it would for a careful user.
        """
        dirty = bool(self.git("status", "--porcelain"))
        if dirty:
            self.git("stash", "push", "--include-untracked", "--quiet")
        for rel, text in files.items():
            target = self.path / rel
            if text is None:
                self.git("rm", "--quiet", rel)
            else:
                write(target, text)
                self.git("add", rel)
        self.git("commit", "--quiet", "-m", message)
        if dirty:
            self.git("stash", "pop", "--index", "--quiet")
        return self.git("rev-parse", "HEAD")


def make_user_repo(path: Path) -> UserRepo:
    """A committed repository with artifacts, tests and code (no work in progress)."""
    path.mkdir(parents=True)
    user_git(path, "init", "--quiet", "--initial-branch=main")
    write(path / "skills/greet/SKILL.md", SKILL_TEXT)
    write(path / "skills/greet/run.sh", "#!/bin/sh\necho hello\n", executable=True)
    write(path / "skills/farewell/SKILL.md", "# Farewell\n\nSay goodbye.\n")
    write(path / "AGENTS.md", "# Agents\n\nBe helpful.\n")
    write(path / "tests/test_agent.py", "def test_agent():\n    assert True\n")
    write(path / "src/app.py", "print('app')\n")
    write(path / "README.md", "# Demo\n")
    write(path / ".gitignore", "*.log\nbuild/\n")
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "initial commit")
    base = user_git(path, "rev-parse", "HEAD")
    user_git(path, "branch", "feature")
    user_git(path, "tag", "v1.0")
    return UserRepo(path=path, repo=git.Repo(path), base=base)


def add_work_in_progress(user: UserRepo) -> None:
    """What a working copy looks like mid-task: every kind of uncommitted state."""
    write(user.path / "README.md", "# Demo\n\nedited, not staged\n")
    write(user.path / "src/app.py", "print('app v2')\n")
    user.git("add", "src/app.py")  # a staged change
    write(user.path / "notes.txt", "untracked notes\n")
    write(user.path / "skills/greet/draft.md", "untracked draft inside the artifact\n")
    write(user.path / "debug.log", "ignored log\n")
    write(user.path / "build/out.txt", "ignored build output\n")


@pytest.fixture
def user_repo(tmp_path: Path) -> Iterator[UserRepo]:
    """A user repository with committed history and uncommitted work in progress."""
    user = make_user_repo(tmp_path / "user-repo")
    add_work_in_progress(user)
    yield user
    user.repo.close()


@pytest.fixture
def clean_user_repo(tmp_path: Path) -> Iterator[UserRepo]:
    """A user repository with committed history and nothing uncommitted."""
    user = make_user_repo(tmp_path / "user-repo")
    yield user
    user.repo.close()


def clone_working_tree(source: Path, dest: Path) -> Path:
    """``source`` as a fresh clone would have it, uncommitted work included, at ``dest``.

    Tracked and untracked-but-not-ignored files are copied into a new repository
    with one commit, so commands that evolve committed files test the code as
    it is now, and nothing they write lands in the real checkout.
    """
    listed = git.Git(str(source)).execute(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], env=USER_ENV)
    for rel in filter(None, str(listed).split("\0")):
        origin = source / rel
        if not origin.is_file() or "__pycache__" in rel:
            continue  # deleted in the working tree but still in the index
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, target)
    user_git(dest.parent, "init", "--quiet", "--initial-branch=main", str(dest))
    user_git(dest, "add", "--all")
    user_git(dest, "commit", "--quiet", "-m", "a fresh clone")
    return dest
