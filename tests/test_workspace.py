"""Workspaces on real repositories: copies, resets, the frozen-path check, caches.

Every test works on a real git repository (``tests/conftest.py``) and asserts
the user's repository is byte-identical afterwards where that is the promise.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import SKILL_TEXT, UserRepo, user_git, write

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import RefusalError
from agentdescent_core.governance import FrozenSet
from agentdescent_core.sandbox.workspace import (
    FrozenCheck,
    ResetStats,
    Violation,
    Workspace,
    WorkspaceError,
    dirty_paths,
)

ROOTS = ("skills", "AGENTS.md")


def make_tree() -> tuple[FileTree, FrozenSet]:
    frozen = FrozenSet(artifact_roots=ROOTS, frozen_files=["tests/test_agent.py"])
    return FileTree(list(ROOTS), frozen=frozen), frozen


def commit_state(user: UserRepo, tree: FileTree, commit: str | None = None) -> dict[str, str]:
    return tree.load_git(user.repo.commit(commit or user.base).tree)


def listing(root: Path) -> dict[str, str]:
    """Every entry below ``root``: kind, permission bits and content (or link target)."""
    out: dict[str, str] = {}
    for current, dirs, files in os.walk(root):
        if Path(current) == root:
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + files:
            full = Path(current) / name
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir:{oct(stat.S_IMODE(st.st_mode))}"
            else:
                out[rel] = f"file:{oct(stat.S_IMODE(st.st_mode))}:{full.read_text()}"
        dirs[:] = [d for d in dirs if not (Path(current) / d).is_symlink()]
    return out


def commit_listing(user: UserRepo, tmp_path: Path, commit: str) -> dict[str, str]:
    """What a fresh checkout of ``commit`` holds (the reference a reset must reach)."""
    clone = tmp_path / f"clone-{commit[:8]}"
    if not clone.exists():
        user_git(tmp_path, "clone", "--quiet", "--no-checkout", str(user.path), str(clone))
        user_git(clone, "checkout", "--quiet", commit)
    return listing(clone)


@pytest.fixture
def ws(user_repo: UserRepo, tmp_path: Path) -> Iterator[Workspace]:
    tree, frozen = make_tree()
    workspace = Workspace.create(user_repo.path, user_repo.base, tree=tree, frozen=frozen,
                                 parent=tmp_path / "workspaces")
    yield workspace
    workspace.close()


# ---------------------------------------------------------------------- creation


def test_create_copies_the_commit_not_the_working_tree(
    user_repo: UserRepo, tmp_path: Path
) -> None:
    before = user_repo.snapshot()
    head_before = user_repo.head_state()
    tree, frozen = make_tree()
    ws = Workspace.create(user_repo.path, "HEAD", tree=tree, frozen=frozen)
    try:
        assert ws.commit == user_repo.base
        assert ws.root.parent.name.startswith("agentdescent-ws-")
        assert ws.root.name == user_repo.path.name
        assert not ws.state_dir.is_relative_to(ws.root)
        assert listing(ws.root) == commit_listing(user_repo, tmp_path, user_repo.base)
        # the user's uncommitted work never reaches the copy
        assert (ws.root / "README.md").read_text() == "# Demo\n"
        assert not (ws.root / "notes.txt").exists()
        assert not (ws.root / "skills/greet/draft.md").exists()
        assert not (ws.root / "debug.log").exists()
        assert os.access(ws.root / "skills/greet/run.sh", os.X_OK)
        assert not (ws.root / ".git").exists()
        ws.reset({**commit_state(user_repo, tree), "skills/greet/SKILL.md": "changed\n"})
        assert ws.check().ok
    finally:
        ws.close()
    assert not ws.root.parent.exists()
    assert user_repo.snapshot() == before
    assert user_repo.head_state() == head_before


def test_create_recreates_committed_symlinks_without_following_them(
    clean_user_repo: UserRepo, tmp_path: Path
) -> None:
    user = clean_user_repo
    os.symlink("../README.md", user.path / "src/readme-link")
    os.symlink("/etc/passwd", user.path / "src/passwd-link")
    user.git("add", "-A")
    user.git("commit", "--quiet", "-m", "links")
    commit = user.git("rev-parse", "HEAD")
    tree, frozen = make_tree()
    with Workspace.create(user.path, commit, tree=tree, frozen=frozen, parent=tmp_path) as ws:
        assert os.readlink(ws.root / "src/readme-link") == "../README.md"
        assert os.readlink(ws.root / "src/passwd-link") == "/etc/passwd"
        assert listing(ws.root) == commit_listing(user, tmp_path, commit)
        # a run that re-points a committed link is caught and undone
        os.unlink(ws.root / "src/readme-link")
        os.symlink("../tests/test_agent.py", ws.root / "src/readme-link")
        assert ws.check().violations == [Violation("src/readme-link", "modified")]
        ws.reset(commit_state(user, tree, commit))
        assert os.readlink(ws.root / "src/readme-link") == "../README.md"


def test_create_handles_submodules_and_line_ending_attributes(
    clean_user_repo: UserRepo, tmp_path: Path
) -> None:
    """A gitlink becomes an empty folder; eol conversion matches a real checkout."""
    user = clean_user_repo
    write(user.path / ".gitattributes", "*.txt eol=crlf\n")
    write(user.path / "data.txt", "one\ntwo\n")
    user.git("add", ".gitattributes", "data.txt")
    user.git("update-index", "--add", "--cacheinfo", f"160000,{user.base},vendor/lib")
    user.git("commit", "--quiet", "-m", "submodule and attributes")
    commit = user.git("rev-parse", "HEAD")
    tree, frozen = make_tree()
    with Workspace.create(user.path, commit, tree=tree, frozen=frozen, parent=tmp_path) as ws:
        assert (ws.root / "vendor/lib").is_dir()
        assert list((ws.root / "vendor/lib").iterdir()) == []
        assert (ws.root / "data.txt").read_bytes() == b"one\r\ntwo\r\n"
        (ws.root / "data.txt").write_bytes(b"one\ntwo\n")
        assert ws.check().violations == [Violation("data.txt", "modified")]
        ws.reset(commit_state(user, tree, commit))
        assert (ws.root / "data.txt").read_bytes() == b"one\r\ntwo\r\n"
        assert ws.check().ok


def test_create_refuses_unknown_commits_and_parents_inside_the_repo(
    user_repo: UserRepo, tmp_path: Path
) -> None:
    tree, frozen = make_tree()
    with pytest.raises(WorkspaceError, match="no-such-ref"):
        Workspace.create(user_repo.path, "no-such-ref", tree=tree, frozen=frozen,
                         parent=tmp_path)
    with pytest.raises(ValueError, match="must name a commit"):
        Workspace.create(user_repo.path, "--output=x", tree=tree, frozen=frozen,
                         parent=tmp_path)
    with pytest.raises(ValueError, match="inside the repository"):
        Workspace.create(user_repo.path, "HEAD", tree=tree, frozen=frozen,
                         parent=user_repo.path / ".agentdescent")
    with pytest.raises(WorkspaceError, match="not a git repository"):
        Workspace.create(tmp_path, "HEAD", tree=tree, frozen=frozen, parent=tmp_path / "w")
    assert list(tmp_path.glob("agentdescent-ws-*")) == []  # nothing left behind


def test_missing_artifact_root_exists_and_is_writable(
    clean_user_repo: UserRepo, tmp_path: Path
) -> None:
    frozen = FrozenSet(artifact_roots=["skills", "prompts"])
    tree = FileTree(["skills", "prompts"], frozen=frozen)
    with Workspace.create(clean_user_repo.path, "HEAD", tree=tree, frozen=frozen,
                          parent=tmp_path) as ws:
        assert ws.writable_paths() == [ws.root / "skills", ws.root / "prompts"]
        assert (ws.root / "prompts").is_dir()
        stats = ws.reset({**commit_state(clean_user_repo, tree), "prompts/a.md": "a\n"})
        assert stats.written == 1
        assert (ws.root / "prompts/a.md").read_text() == "a\n"
        ws.reset(commit_state(clean_user_repo, tree))
        assert (ws.root / "prompts").is_dir()
        assert not (ws.root / "prompts/a.md").exists()


# ---------------------------------------------------------------------- reset


def test_reset_writes_restores_and_removes_exactly_what_changed(
    ws: Workspace, user_repo: UserRepo, tmp_path: Path
) -> None:
    tree = ws.tree
    base = commit_state(user_repo, tree)
    reference = commit_listing(user_repo, tmp_path, user_repo.base)
    candidate = dict(base)
    candidate["skills/greet/SKILL.md"] = "# Greet\n\nSay hi.\n"
    candidate["skills/new/notes.md"] = "new file in a new folder\n"
    candidate["AGENTS.md"] = "# Agents\n\nBe brief.\n"
    del candidate["skills/farewell/SKILL.md"]

    stats = ws.reset(candidate)
    assert (stats.written, stats.restored, stats.removed) == (3, 0, 1)
    assert stats.seconds >= 0
    assert (ws.root / "skills/new/notes.md").read_text() == "new file in a new folder\n"
    assert not (ws.root / "skills/farewell/SKILL.md").exists()
    assert os.access(ws.root / "skills/greet/run.sh", os.X_OK)  # untouched, still executable

    again = ws.reset(candidate)
    assert again == ResetStats(0, 0, 0, again.seconds)

    stats = ws.reset(base)
    assert (stats.written, stats.removed) == (3, 2)  # farewell, greet, AGENTS; skills/new/*
    assert listing(ws.root) == reference
    assert ws.check().ok


def test_reset_keeps_the_executable_bit_of_a_rewritten_script(ws: Workspace,
                                                              user_repo: UserRepo) -> None:
    state = commit_state(user_repo, ws.tree)
    ws.reset({**state, "skills/greet/run.sh": "#!/bin/sh\necho bonjour\n"})
    script = ws.root / "skills/greet/run.sh"
    assert os.access(script, os.X_OK)
    out = subprocess.run([str(script)], capture_output=True, text=True, check=True)
    assert out.stdout == "bonjour\n"


def test_reset_refuses_state_keys_outside_the_artifact_or_frozen(ws: Workspace,
                                                                user_repo: UserRepo) -> None:
    state = commit_state(user_repo, ws.tree)
    with pytest.raises(ValueError, match="inside the artifact roots"):
        ws.reset({**state, "tests/test_agent.py": "assert True\n"})
    with pytest.raises(ValueError, match="not a normalised path"):
        ws.reset({**state, "skills/../tests/test_agent.py": "x"})
    with pytest.raises(RefusalError) as info:
        ws.reset({**state, "skills/greet/conftest.py": "x = 1\n"})
    assert info.value.category == "frozen-violation"
    assert not (ws.root / "skills/greet/conftest.py").exists()  # refused before writing


# ---------------------------------------------------------------------- the frozen check


def _modify(root: Path) -> None:
    (root / "tests/test_agent.py").write_text("def test_agent():\n    assert 1\n")


def _modify_keeping_mtime(root: Path) -> None:
    target = root / "tests/test_agent.py"
    st = target.stat()
    target.write_text("def test_agent():\n    pass  # x\n"[: st.st_size].ljust(st.st_size))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # ctime still moves


def _add_conftest_in_artifact(root: Path) -> None:
    (root / "skills/greet/conftest.py").write_text("import pytest\n")


def _add_pytest_ini(root: Path) -> None:
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:python\n")


def _remove_test(root: Path) -> None:
    (root / "tests/test_agent.py").unlink()


def _chmod(root: Path) -> None:
    (root / "src/app.py").chmod(0o777)


def _symlink_over_test(root: Path) -> None:
    (root / "tests/test_agent.py").unlink()
    (root / "tests/test_agent.py").symlink_to("/etc/passwd")


def _dir_replaced_by_file(root: Path) -> None:
    import shutil

    shutil.rmtree(root / "tests")
    (root / "tests").write_text("not a folder\n")


def _write_through_artifact_symlink(root: Path) -> None:
    link = root / "skills/greet/notes.md"
    link.symlink_to("../../tests/test_agent.py")
    link.write_text("def test_agent():\n    pass\n")


def _write_through_artifact_hardlink(root: Path) -> None:
    link = root / "skills/greet/copy.py"
    os.link(root / "tests/test_agent.py", link)
    with open(link, "a", encoding="utf-8") as handle:
        handle.write("    assert True\n")


HOSTILE: dict[str, tuple[Callable[[Path], None], list[Violation]]] = {
    "modify a test": (_modify, [Violation("tests/test_agent.py", "modified")]),
    "modify, then put the mtime back": (
        _modify_keeping_mtime, [Violation("tests/test_agent.py", "modified")]
    ),
    "conftest.py inside the artifact": (
        _add_conftest_in_artifact, [Violation("skills/greet/conftest.py", "added")]
    ),
    "pytest.ini at the root": (_add_pytest_ini, [Violation("pytest.ini", "added")]),
    "delete a test": (_remove_test, [Violation("tests/test_agent.py", "removed")]),
    "chmod source": (_chmod, [Violation("src/app.py", "modified")]),
    "test replaced by a symlink": (
        _symlink_over_test, [Violation("tests/test_agent.py", "type-changed")]
    ),
    "write through a symlink in the artifact": (
        _write_through_artifact_symlink, [Violation("tests/test_agent.py", "modified")]
    ),
    "write through a hard link in the artifact": (
        _write_through_artifact_hardlink, [Violation("tests/test_agent.py", "modified")]
    ),
    "tests folder replaced by a file": (
        _dir_replaced_by_file,
        [Violation("tests", "type-changed"), Violation("tests/test_agent.py", "removed")],
    ),
}


@pytest.mark.parametrize("attack", list(HOSTILE))
def test_a_run_that_changes_a_frozen_path_is_caught_and_undone(
    attack: str, ws: Workspace, user_repo: UserRepo, tmp_path: Path
) -> None:
    act, expected = HOSTILE[attack]
    state = {**commit_state(user_repo, ws.tree), "skills/greet/SKILL.md": "evolved\n"}
    ws.reset(state)
    wanted = listing(ws.root)
    ws.new_run_scratch()
    act(ws.root)
    result = ws.check()
    assert result.violations == expected
    assert not result.ok
    error = result.violations_error()
    assert (error.category, error.code) == ("frozen-violation", "frozen-modified")
    assert expected[0].path in error.message
    ws.reset(state)
    assert listing(ws.root) == wanted
    assert ws.check().ok


def test_reset_without_check_still_sees_what_a_run_did(ws: Workspace,
                                                       user_repo: UserRepo) -> None:
    state = commit_state(user_repo, ws.tree)
    ws.reset(state)
    wanted = listing(ws.root)
    ws.new_run_scratch()
    _modify(ws.root)
    (ws.root / "skills/greet/extra.md").write_text("written by the run\n")
    stats = ws.reset(state)  # no check() in between: the reset scans itself
    assert (stats.restored, stats.removed) == (1, 1)
    assert listing(ws.root) == wanted


def test_reset_never_follows_a_symlink_planted_over_a_folder(
    ws: Workspace, user_repo: UserRepo, tmp_path: Path
) -> None:
    """A run swaps an artifact folder for a link outside; resets must not write or delete there."""
    outside = tmp_path / "outside"
    write(outside / "notes.md", "precious\n")
    write(outside / "SKILL.md", "precious too\n")
    base = commit_state(user_repo, ws.tree)
    with_folder = {**base, "skills/new/notes.md": "candidate notes\n"}
    ws.reset(with_folder)
    ws.new_run_scratch()
    import shutil

    shutil.rmtree(ws.root / "skills/new")
    (ws.root / "skills/new").symlink_to(outside)
    shutil.rmtree(ws.root / "skills/greet")
    (ws.root / "skills/greet").symlink_to(outside)
    result = ws.check()
    assert result.ok  # all inside the artifact: drift, undone below
    assert "skills/greet" in result.drift
    ws.reset(base)  # drops skills/new/notes.md, rewrites skills/greet/SKILL.md
    assert (outside / "notes.md").read_text() == "precious\n"
    assert (outside / "SKILL.md").read_text() == "precious too\n"
    assert not os.path.lexists(ws.root / "skills/new")
    assert (ws.root / "skills/greet").is_dir()
    assert not (ws.root / "skills/greet").is_symlink()
    assert (ws.root / "skills/greet/SKILL.md").read_text() == SKILL_TEXT
    assert os.access(ws.root / "skills/greet/run.sh", os.X_OK)
    assert ws.check().ok


def test_touching_a_frozen_file_without_changing_it_is_no_violation(
    ws: Workspace, user_repo: UserRepo
) -> None:
    ws.reset(commit_state(user_repo, ws.tree))
    os.utime(ws.root / "tests/test_agent.py", (1, 1))
    target = ws.root / "README.md"
    target.write_text(target.read_text())  # same bytes, new mtime/ctime
    result = ws.check()
    assert result == FrozenCheck([], [], result.seconds)


def test_artifact_files_written_by_a_run_are_drift_and_removed(
    ws: Workspace, user_repo: UserRepo
) -> None:
    state = commit_state(user_repo, ws.tree)
    ws.reset(state)
    (ws.root / "skills/greet/output.txt").write_text("scratch output\n")
    (ws.root / "skills/greet/SKILL.md").write_text("rewritten by its own script\n")
    (ws.root / "skills/passwd").symlink_to("/etc/passwd")
    result = ws.check()
    assert result.ok
    assert result.drift == ["skills/greet/SKILL.md", "skills/greet/output.txt", "skills/passwd"]
    stats = ws.reset(state)
    assert (stats.written, stats.removed) == (1, 2)
    assert (ws.root / "skills/greet/SKILL.md").read_text() == SKILL_TEXT
    assert not os.path.lexists(ws.root / "skills/passwd")


def test_caches_are_neither_violations_nor_kept(ws: Workspace, user_repo: UserRepo) -> None:
    state = commit_state(user_repo, ws.tree)
    ws.reset(state)
    write(ws.root / "tests/__pycache__/test_agent.cpython-311-pytest-8.pyc", "stale")
    write(ws.root / ".pytest_cache/v/cache/lastfailed", "{}")
    write(ws.root / "skills/greet/__pycache__/x.pyc", "bytecode")
    write(ws.root / "src/stray.pyc", "bytecode")
    result = ws.check()
    assert result.ok
    assert result.drift == []
    stats = ws.reset(state)
    assert stats.removed == 4
    assert not (ws.root / "tests/__pycache__").exists()
    assert not (ws.root / ".pytest_cache").exists()
    assert not (ws.root / "skills/greet/__pycache__").exists()
    assert not (ws.root / "src/stray.pyc").exists()


def test_rewritten_modules_never_run_stale_bytecode(ws: Workspace, user_repo: UserRepo) -> None:
    """Same size, same second: only dropping the cached bytecode makes the edit visible."""
    state = commit_state(user_repo, ws.tree)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(ws.pycache_prefix)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    probe = [sys.executable, "-c", "import sys; sys.path.insert(0, 'skills'); import tool; "
             "print(tool.VALUE)"]
    outputs = []
    for value in ("'aaaa'", "'bbbb'", "'aaaa'"):
        ws.reset({**state, "skills/tool.py": f"VALUE = {value}\n"})
        # the run's clock cannot tell the versions apart: same size, same mtime
        os.utime(ws.root / "skills/tool.py", ns=(10**18, 10**18))
        out = subprocess.run(probe, cwd=ws.root, env=env, capture_output=True, text=True,
                             check=True)
        outputs.append(out.stdout.strip())
        assert ws.check().drift == []  # touched by utime, content as written: no change
    assert outputs == ["aaaa", "bbbb", "aaaa"]
    assert list(ws.pycache_prefix.rglob("tool.*.pyc"))  # bytecode did go to the prefix
    assert not list(ws.root.rglob("__pycache__"))


def test_workspaces_of_one_repository_can_be_created_at_once(
    user_repo: UserRepo, tmp_path: Path
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    before = user_repo.snapshot()
    tree, frozen = make_tree()
    state = {**commit_state(user_repo, tree), "skills/greet/SKILL.md": "parallel\n"}

    def one(_: int) -> dict[str, str]:
        with Workspace.create(user_repo.path, user_repo.base, tree=tree, frozen=frozen,
                              parent=tmp_path / "pool") as ws:
            ws.reset(state)
            return listing(ws.root)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, range(4)))
    assert all(r == results[0] for r in results)
    assert results[0]["skills/greet/SKILL.md"] == "file:0o644:parallel\n"
    assert user_repo.snapshot() == before


def test_bytecode_planted_by_a_run_never_reaches_the_next_run(
    clean_user_repo: UserRepo, tmp_path: Path
) -> None:
    """A run caches a passing test's bytecode under the failing test's name; reset drops it.

    The frozen test file ends the run with its committed content (only its
    ctime moved), so the workspace check cannot see the attack: the bytecode
    directory the child may write must not survive to the next candidate.
    """
    import struct

    user = clean_user_repo
    failing = "def test_claim():\n    assert 1 == 2\n"
    commit = user.commit_on_main({"tests/test_claim.py": failing}, "a failing test")
    tree, frozen = make_tree()
    env = {**os.environ, "PYTHONPYCACHEPREFIX": "", "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    def pytest_run(ws: Workspace) -> str:
        env["PYTHONPYCACHEPREFIX"] = str(ws.pycache_prefix)
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-p", "no:benchmark", "tests/test_claim.py"],  # no .benchmarks dir in rootdir
            cwd=ws.root, env=env, capture_output=True, text=True,
        )
        return out.stdout.strip().splitlines()[-1]

    with Workspace.create(user.path, commit, tree=tree, frozen=frozen, parent=tmp_path) as ws:
        state = commit_state(user, tree, commit)
        ws.reset(state)
        assert "1 failed" in pytest_run(ws)
        # the hostile run: same-size passing source, compile it, put the file back
        target = ws.root / "tests/test_claim.py"
        target.write_text(failing.replace("1 == 2", "2 == 2"))
        assert "1 passed" in pytest_run(ws)
        target.write_text(failing)
        st = target.stat()
        for pyc in ws.pycache_prefix.rglob("test_claim*.pyc"):
            data = bytearray(pyc.read_bytes())
            data[8:16] = struct.pack("<II", int(st.st_mtime) & 0xFFFFFFFF, st.st_size)
            pyc.write_bytes(bytes(data))
        assert ws.check().ok  # undetectable in the workspace itself
        ws.reset(state)
        assert list(ws.pycache_prefix.iterdir()) == []
        assert "1 failed" in pytest_run(ws)


# ---------------------------------------------------------------------- hashes, runs, close


def test_frozen_tree_hash_tracks_frozen_files_only(clean_user_repo: UserRepo,
                                                   tmp_path: Path) -> None:
    user = clean_user_repo
    tree, frozen = make_tree()

    def frozen_hash(commit: str) -> str:
        with Workspace.create(user.path, commit, tree=tree, frozen=frozen,
                              parent=tmp_path) as ws:
            return ws.frozen_tree_hash

    first = frozen_hash(user.base)
    assert frozen_hash(user.base) == first
    artifact_only = user.commit_on_main({"skills/greet/SKILL.md": "# v2\n"}, "artifact")
    assert frozen_hash(artifact_only) == first
    test_change = user.commit_on_main({"tests/test_agent.py": "def test_x(): pass\n"}, "test")
    assert frozen_hash(test_change) != first
    (user.path / "src/app.py").chmod(0o755)
    user.git("commit", "--quiet", "-am", "mode only")
    assert frozen_hash(user.git("rev-parse", "HEAD")) != frozen_hash(test_change)


def test_new_run_scratch_is_fresh_and_private(ws: Workspace) -> None:
    first = ws.new_run_scratch()
    (first / "leftover").write_text("x")
    second = ws.new_run_scratch()
    assert second != first
    assert not first.exists()
    assert list(second.iterdir()) == []
    assert second.parent == ws.state_dir / "runs"
    assert not second.is_relative_to(ws.root)


def test_close_removes_everything_and_is_final(user_repo: UserRepo, tmp_path: Path) -> None:
    before = user_repo.snapshot()
    tree, frozen = make_tree()
    ws = Workspace.create(user_repo.path, "HEAD", tree=tree, frozen=frozen, parent=tmp_path)
    ws.new_run_scratch()
    (ws.root / "tests/test_agent.py").chmod(0o000)
    container = ws.root.parent
    ws.close()
    ws.close()
    assert not container.exists()
    with pytest.raises(WorkspaceError, match="closed"):
        ws.reset({})
    assert user_repo.snapshot() == before


# ---------------------------------------------------------------------- dirty paths


def test_dirty_paths_lists_uncommitted_work_read_only(user_repo: UserRepo) -> None:
    # make the index's stat cache stale, so a writing `git status` would refresh it
    os.utime(user_repo.path / "AGENTS.md", (2, 2))
    before = user_repo.snapshot()
    assert dirty_paths(user_repo.path) == [
        "README.md", "notes.txt", "skills/greet/draft.md", "src/app.py",
    ]
    assert dirty_paths(user_repo.path, ["skills", "tests"]) == ["skills/greet/draft.md"]
    assert user_repo.snapshot() == before


def test_dirty_paths_of_a_clean_repository_is_empty(clean_user_repo: UserRepo) -> None:
    assert dirty_paths(clean_user_repo.path) == []
    clean_user_repo.git("rm", "--quiet", "--cached", "README.md")
    assert dirty_paths(clean_user_repo.path) == ["README.md"]


def test_the_names_that_moved_out_of_workspace_are_still_importable_from_it() -> None:
    """Callers import these from ``sandbox.workspace``; they now live in their role's module."""
    from agentdescent_core.sandbox import frozencheck, userrepo, workspace

    homes = {
        frozencheck: ("FrozenCheck", "ResetStats", "Violation", "VIOLATION_KINDS",
                      "MAX_PROTECTED_FILES"),
        userrepo: ("dirty_paths", "uncommitted_changes"),
    }
    for home, names in homes.items():
        for name in names:
            assert getattr(workspace, name) is getattr(home, name), name
    assert workspace.Workspace.check is frozencheck._CheckedCopy.check
