from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import git
import pytest

from agentdescent_core.artifacts import (
    Diff,
    FileTree,
    FileTreeLimits,
    Strategy,
    TrustRegion,
    render_tree,
    state_hash,
)
from agentdescent_core.errors import RefusalError
from agentdescent_core.governance import FrozenSet

needs_symlinks = pytest.mark.skipif(
    sys.platform == "win32", reason="creating symlinks needs privileges on Windows"
)


def write(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))


def make_repo(root: Path) -> git.Repo:
    repo = git.Repo.init(root)
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "Test")
        cfg.set_value("user", "email", "test@example.com")
    return repo


def commit_all(repo: git.Repo, message: str = "commit") -> git.Commit:
    repo.git.add("-A")
    repo.git.commit("-m", message, "--allow-empty")
    return repo.head.commit


def modes(tree: git.Tree) -> dict[str, int]:
    """Every path's git mode, all levels down (a plain traverse yields objects, not edges)."""
    return {os.fspath(item.path): item.mode for item in tree.traverse()
            if not isinstance(item, tuple)}


BASIC = {
    "skills/a/SKILL.md": "# A\nDo things.\n",
    "skills/a/scripts/run.sh": "echo hi\n",
    "skills/b/SKILL.md": "no final newline",
    "skills/a/conftest.py": "import os\n",
    "skills/a/tests/test_x.py": "def test_x():\n    pass\n",
    "skills/crlf.txt": "line1\r\nline2\r\n",
    "AGENTS.md": "be nice\n",
    "src/pkg.py": "x = 1\n",
    "tests/test_top.py": "def test():\n    pass\n",
}

EXPECTED = {
    "skills/a/SKILL.md": "# A\nDo things.\n",
    "skills/a/scripts/run.sh": "echo hi\n",
    "skills/b/SKILL.md": "no final newline",
    "skills/crlf.txt": "line1\r\nline2\r\n",
}


def skills_tree(**kwargs: object) -> FileTree:
    frozen = FrozenSet(["**/test_*.py"], artifact_roots=["skills"])
    return FileTree(["skills"], frozen=frozen, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- construction


def test_roots_are_normalised_and_nested_roots_dropped():
    tree = FileTree(["./skills/", "skills/a", "AGENTS.md", "skills"])
    assert tree.roots == ("skills", "AGENTS.md")


@pytest.mark.parametrize("roots", [[], ["."], ["../x"], ["/abs"]])
def test_bad_roots_refused(roots):
    with pytest.raises((ValueError, RefusalError)):
        FileTree(roots)


def test_single_string_root_accepted():
    assert FileTree("skills").roots == ("skills",)


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("skills/a.md", True),
        ("./skills/a/b.md", True),
        ("skills", True),
        ("AGENTS.md", True),
        ("skillset/a.md", False),
        ("src/x.py", False),
        ("../skills/a.md", False),
        ("/skills/a.md", False),
    ],
)
def test_contains(path, inside):
    assert FileTree(["skills", "AGENTS.md"]).contains(path) is inside


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_file_bytes": 0}, "max_file_bytes"),
        ({"max_files": -1}, "max_files"),
        ({"max_files": 1.5}, "max_files"),
    ],
)
def test_limits_validated(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FileTreeLimits(**kwargs)


def test_trust_region_validated():
    with pytest.raises(ValueError, match="max_files_per_diff"):
        TrustRegion(max_files_per_diff=0)


def test_filetree_is_a_strategy():
    assert isinstance(FileTree(["skills"]), Strategy)


# ---------------------------------------------------------------- load_disk


def test_load_disk_reads_evolvable_text_files(tmp_path):
    write(tmp_path, BASIC)
    state = skills_tree().load_disk(tmp_path)
    assert state == EXPECTED
    assert list(state) == sorted(state)


def test_load_disk_single_file_root_and_absent_root(tmp_path):
    write(tmp_path, BASIC)
    tree = FileTree(["AGENTS.md", "prompts", "nothing/here.md"])
    assert tree.load_disk(tmp_path) == {"AGENTS.md": "be nice\n"}


def test_root_below_a_file_is_empty(tmp_path):
    write(tmp_path, {"AGENTS.md": "x\n"})
    assert FileTree(["AGENTS.md/sub"]).load_disk(tmp_path) == {}


def test_initial_uses_repo_root(tmp_path):
    write(tmp_path, BASIC)
    assert skills_tree(repo_root=tmp_path).initial() == EXPECTED
    assert skills_tree().initial() == {}


def test_load_disk_skips_tool_caches(tmp_path):
    write(
        tmp_path,
        {
            "skills/a.md": "a\n",
            "skills/__pycache__/mod.cpython-311.pyc": b"\x00\x01binary",
            "skills/mod.pyc": b"\x00",
            "skills/.DS_Store": b"\x00\x00",
        },
    )
    assert FileTree(["skills"]).load_disk(tmp_path) == {"skills/a.md": "a\n"}


def test_load_disk_leaves_out_executable_config_and_explicit_frozen(tmp_path):
    write(tmp_path, {"skills/a.md": "a\n", "skills/pyproject.toml": "[x]\n", "skills/k.json": "{}"})
    frozen = FrozenSet(artifact_roots=["skills"], frozen_files=["skills/k.json"])
    assert FileTree(["skills"], frozen=frozen).load_disk(tmp_path) == {"skills/a.md": "a\n"}


def test_missing_repo_root_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="repository root"):
        FileTree(["skills"]).load_disk(tmp_path / "nope")


@pytest.mark.parametrize(
    ("files", "code", "category", "path"),
    [
        ({"skills/img.png": b"\x89PNG\r\n\x1a\n\x00\x00"}, "binary-file", "invalid-proposal",
         "skills/img.png"),
        ({"skills/latin1.txt": "café".encode("latin-1")}, "not-utf8", "invalid-proposal",
         "skills/latin1.txt"),
        ({"skills/big.md": "x" * 101}, "file-too-large", "oversized", "skills/big.md"),
        ({f"skills/f{i}.md": "x" for i in range(4)}, "too-many-files", "oversized", "skills/f3.md"),
        ({"skills/sub/.git": "gitdir: ../../.git/modules/sub\n"}, "submodule", "invalid-proposal",
         "skills/sub"),
    ],
)
def test_load_disk_refusals(tmp_path, files, code, category, path):
    write(tmp_path, files)
    tree = FileTree(["skills"], limits=FileTreeLimits(max_file_bytes=100, max_files=3))
    with pytest.raises(RefusalError) as info:
        tree.load_disk(tmp_path)
    assert info.value.code == code
    assert info.value.category == category
    assert info.value.path == path
    assert path in info.value.message


@needs_symlinks
@pytest.mark.parametrize(
    ("link", "target", "root", "where"),
    [
        ("skills/link.md", "a.md", "skills", "skills/link.md"),
        ("skills/linkdir", "../elsewhere", "skills", "skills/linkdir"),
        ("skills", "elsewhere", "skills", "skills"),
        ("prompts", "elsewhere", "prompts/a.md", "prompts"),
    ],
)
def test_load_disk_never_follows_symlinks(tmp_path, link, target, root, where):
    write(tmp_path, {"elsewhere/secret.md": "s\n"})
    if link != "skills":
        write(tmp_path, {"skills/a.md": "a\n"})
    os.symlink(target, tmp_path / link)
    with pytest.raises(RefusalError) as info:
        FileTree([root]).load_disk(tmp_path)
    assert info.value.code == "symlink"
    assert info.value.path == where


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_load_disk_refuses_special_files(tmp_path):
    (tmp_path / "skills").mkdir()
    os.mkfifo(tmp_path / "skills" / "pipe")
    with pytest.raises(RefusalError) as info:
        FileTree(["skills"]).load_disk(tmp_path)
    assert info.value.code == "special-file"


def test_control_character_file_name_refused_on_load(tmp_path):
    write(tmp_path, {"skills/a\nb.md": "x\n"})
    with pytest.raises(RefusalError) as info:
        FileTree(["skills"]).load_disk(tmp_path)
    assert info.value.code == "control-character"


# ---------------------------------------------------------------- load_git


def test_load_git_matches_load_disk(tmp_path):
    write(tmp_path, BASIC)
    repo = make_repo(tmp_path)
    commit = commit_all(repo)
    tree = skills_tree()
    from_git = tree.load_git(commit.tree)
    assert from_git == EXPECTED
    assert state_hash(from_git) == state_hash(tree.load_disk(tmp_path))


def test_load_git_single_file_and_absent_roots(tmp_path):
    write(tmp_path, BASIC)
    commit = commit_all(make_repo(tmp_path))
    tree = FileTree(["AGENTS.md", "prompts", "src/pkg.py/x"])
    assert tree.load_git(commit.tree) == {"AGENTS.md": "be nice\n"}


def test_load_git_reads_committed_content_not_working_tree(tmp_path):
    write(tmp_path, {"skills/a.md": "committed\n"})
    commit = commit_all(make_repo(tmp_path))
    write(tmp_path, {"skills/a.md": "edited\n", "skills/new.md": "new\n"})
    assert FileTree(["skills"]).load_git(commit.tree) == {"skills/a.md": "committed\n"}


def test_load_git_skips_committed_caches(tmp_path):
    write(tmp_path, {"skills/a.md": "a\n", "skills/__pycache__/m.pyc": b"\x00"})
    commit = commit_all(make_repo(tmp_path))
    assert FileTree(["skills"]).load_git(commit.tree) == {"skills/a.md": "a\n"}


@pytest.mark.parametrize(
    ("files", "code", "path"),
    [
        ({"skills/img.bin": b"\x00\xff\x00"}, "binary-file", "skills/img.bin"),
        ({"skills/latin1.txt": "naïve".encode("latin-1")}, "not-utf8", "skills/latin1.txt"),
        ({"skills/big.md": "y" * 101}, "file-too-large", "skills/big.md"),
        ({f"skills/f{i}.md": "x" for i in range(4)}, "too-many-files", "skills/f3.md"),
    ],
)
def test_load_git_refusals(tmp_path, files, code, path):
    write(tmp_path, {"README.md": "r\n", **files})
    commit = commit_all(make_repo(tmp_path))
    tree = FileTree(["skills"], limits=FileTreeLimits(max_file_bytes=100, max_files=3))
    with pytest.raises(RefusalError) as info:
        tree.load_git(commit.tree)
    assert info.value.code == code
    assert info.value.path == path


@needs_symlinks
@pytest.mark.parametrize(
    ("link", "target", "root", "where"),
    [
        ("skills/link.md", "a.md", "skills", "skills/link.md"),
        ("skills/linkdir", "../elsewhere", "skills", "skills/linkdir"),
        ("prompts", "elsewhere", "prompts", "prompts"),
        ("prompts", "elsewhere", "prompts/secret.md", "prompts"),
    ],
)
def test_load_git_refuses_symlink_blobs(tmp_path, link, target, root, where):
    write(tmp_path, {"elsewhere/secret.md": "s\n", "skills/a.md": "a\n"})
    os.symlink(target, tmp_path / link)
    commit = commit_all(make_repo(tmp_path))
    assert modes(commit.tree)[link] == 0o120000
    with pytest.raises(RefusalError) as info:
        FileTree([root]).load_git(commit.tree)
    assert info.value.code == "symlink"
    assert info.value.path == where


def test_load_git_with_index_built_symlink_and_binary(tmp_path):
    """Built through GitPython's index API rather than `git add`."""
    repo = make_repo(tmp_path)
    write(tmp_path, {"skills/a.md": "a\n", "skills/blob.dat": b"\x00\x01\x02"})
    os.symlink("a.md", tmp_path / "skills" / "ln")
    repo.index.add(["skills/a.md"])
    first = repo.index.commit("text only")
    assert FileTree(["skills"]).load_git(first.tree) == {"skills/a.md": "a\n"}
    repo.index.add(["skills/ln"])
    second = repo.index.commit("with link")
    with pytest.raises(RefusalError, match="symbolic link"):
        FileTree(["skills"]).load_git(second.tree)
    repo.index.remove(["skills/ln"])
    repo.index.add(["skills/blob.dat"])
    third = repo.index.commit("with binary")
    with pytest.raises(RefusalError, match="binary") as info:
        FileTree(["skills"]).load_git(third.tree)
    assert info.value.code == "binary-file"


@pytest.mark.parametrize(
    ("root", "where"), [("skills", "skills/sub"), ("skills/sub", "skills/sub")]
)
def test_load_git_refuses_submodules(tmp_path, root, where):
    inner = make_repo(tmp_path / "inner")
    write(tmp_path / "inner", {"x.md": "x\n"})
    inner_commit = commit_all(inner)
    outer_dir = tmp_path / "outer"
    outer = make_repo(outer_dir)
    write(outer_dir, {"skills/a.md": "a\n"})
    outer.git.add("-A")
    outer.git.update_index("--add", "--cacheinfo", f"160000,{inner_commit.hexsha},skills/sub")
    outer.git.commit("-m", "with submodule")
    tree = outer.head.commit.tree
    assert modes(tree)["skills/sub"] == 0o160000
    with pytest.raises(RefusalError) as info:
        FileTree([root]).load_git(tree)
    assert info.value.code == "submodule"
    assert info.value.path == where


# ---------------------------------------------------------------- render / hash


def test_render_and_hash_do_not_depend_on_insertion_order():
    forward = dict(EXPECTED)
    backward = dict(reversed(list(EXPECTED.items())))
    assert list(forward) != list(backward)
    assert render_tree(forward) == render_tree(backward)
    assert state_hash(forward) == state_hash(backward)
    assert FileTree(["skills"]).render(forward) == render_tree(forward)


def test_render_is_canonical():
    state = {"b/x.md": "second", "a/y.md": "first\n", "c/empty.md": ""}
    assert render_tree(state) == (
        "==> a/y.md <==\nfirst\n\n"
        "==> b/x.md (no newline at end) <==\nsecond\n\n"
        "==> c/empty.md <==\n"
    )
    assert render_tree({}) == ""


@pytest.mark.parametrize(
    "other",
    [
        {"a": "1", "b": "3"},  # different content
        {"a": "1", "c": "2"},  # different path
        {"a": "1"},  # a file fewer
        {"a": "1", "b": "2", "c": ""},  # an extra empty file
        {"a": "1b", "": "2"},  # the framing cannot be shifted between path and text
        {"a1": "", "b": "2"},
    ],
)
def test_state_hash_distinguishes_states(other):
    base = {"a": "1", "b": "2"}
    assert state_hash(other) != state_hash(base)


def test_state_hash_is_hex_sha256_and_stable():
    value = state_hash({"skills/a.md": "a\n"})
    assert len(value) == 64
    assert int(value, 16) >= 0
    assert value == state_hash({"skills/a.md": "a\n"})
    assert state_hash({}) != state_hash({"": ""})


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("path", "category", "code"),
    [
        ("/etc/passwd", "invalid-proposal", "absolute-path"),
        ("C:\\skills\\a.md", "invalid-proposal", "absolute-path"),
        ("skills/../src/pkg.py", "invalid-proposal", "parent-traversal"),
        ("skills/a\x00.md", "invalid-proposal", "nul-byte"),
        ("", "invalid-proposal", "empty-path"),
        ("src/pkg.py", "invalid-proposal", "outside-artifact"),
        ("skillset/a.md", "invalid-proposal", "outside-artifact"),
        ("skills/a/conftest.py", "invalid-proposal", "executable-config"),
        ("skills/evil.pth", "invalid-proposal", "executable-config"),
        ("skills/a/tests/test_x.py", "frozen-violation", "frozen-path"),
        ("skills/.git/config", "invalid-proposal", "git-internal"),
    ],
)
def test_validate_path_refusals(path, category, code):
    with pytest.raises(RefusalError) as info:
        skills_tree().validate_path(path)
    assert (info.value.category, info.value.code) == (category, code)


def test_validate_path_returns_normal_form():
    assert skills_tree().validate_path("./skills//a/new.md") == "skills/a/new.md"


def test_validate_ops_normalises_and_sorts():
    ops = skills_tree().validate_ops({"skills\\b.md": "b", "./skills/a.md": None})
    assert list(ops.items()) == [("skills/a.md", None), ("skills/b.md", "b")]


@pytest.mark.parametrize(
    ("ops", "category", "code"),
    [
        ({f"skills/{i}.md": "x" for i in range(3)}, "oversized", "too-many-files"),
        ({"skills/a.md": "é" * 6}, "oversized", "file-too-large"),
        ({"skills/a.md": "a\x00b"}, "invalid-proposal", "binary-file"),
        ({"skills/a.md": 3}, "invalid-proposal", "not-text"),
        ({"skills/a.md": "a", "./skills/a.md": "b"}, "invalid-proposal", "duplicate-path"),
        ({"src/pkg.py": "x"}, "invalid-proposal", "outside-artifact"),
        ({"skills/a/tests/test_x.py": None}, "frozen-violation", "frozen-path"),
    ],
)
def test_validate_ops_refusals(ops, category, code):
    tree = skills_tree(trust_region=TrustRegion(max_files_per_diff=2, max_bytes_per_file=10))
    with pytest.raises(RefusalError) as info:
        tree.validate_ops(ops)
    assert (info.value.category, info.value.code) == (category, code)


def test_validate_ops_refuses_non_mapping():
    with pytest.raises(RefusalError) as info:
        skills_tree().validate_ops([("skills/a.md", "x")])  # type: ignore[arg-type]
    assert info.value.code == "not-a-mapping"


def test_per_file_limit_is_the_smaller_of_trust_region_and_limits():
    tree = FileTree(
        ["skills"],
        limits=FileTreeLimits(max_file_bytes=5),
        trust_region=TrustRegion(max_bytes_per_file=1000),
    )
    tree.validate_ops({"skills/a.md": "12345"})
    with pytest.raises(RefusalError, match="5 allowed"):
        tree.validate_ops({"skills/a.md": "123456"})


# ---------------------------------------------------------------- to_diff

STATE = {"skills/a.md": "a\n", "skills/b.md": "b\n"}


def test_to_diff_builds_a_diff():
    diff = skills_tree().to_diff(
        STATE, {"skills/a.md": "A\n", "./skills/c.md": "c\n", "skills/b.md": None},
        author="w1", base_version=7, target="skills", rationale="because",
    )
    assert isinstance(diff, Diff)
    assert dict(diff.ops) == {"skills/a.md": "A\n", "skills/b.md": None, "skills/c.md": "c\n"}
    assert (diff.author, diff.base_version, diff.target, diff.rationale) == (
        "w1", 7, "skills", "because"
    )
    assert diff.apply(STATE) == {"skills/a.md": "A\n", "skills/c.md": "c\n"}


@pytest.mark.parametrize(
    "proposal",
    [
        {},
        {"skills/a.md": "a\n"},
        {"skills/gone.md": None},
        {"./skills/a.md": "a\n", "skills/b.md": "b\n", "skills/nope.md": None},
    ],
)
def test_to_diff_returns_none_when_nothing_changes(proposal):
    assert skills_tree().to_diff(STATE, proposal, "w", 0, "skills") is None


def test_to_diff_drops_no_ops_before_counting():
    tree = skills_tree(trust_region=TrustRegion(max_files_per_diff=1))
    proposal = {"skills/a.md": "a\n", "skills/b.md": "B\n"}
    diff = tree.to_diff(STATE, proposal, "w", 0, "skills")
    assert diff is not None
    assert dict(diff.ops) == {"skills/b.md": "B\n"}
    with pytest.raises(RefusalError, match="at most 1"):
        tree.to_diff(STATE, {"skills/a.md": "x", "skills/b.md": "y"}, "w", 0, "skills")


def test_to_diff_still_refuses_invalid_no_ops():
    with pytest.raises(RefusalError) as info:
        skills_tree().to_diff(STATE, {"src/pkg.py": None}, "w", 0, "skills")
    assert info.value.code == "outside-artifact"


@pytest.mark.parametrize(
    "proposal",
    [
        {"skills/a.md/x.md": "x"},  # a file used as a directory
        {"skills/sub": "x"},  # a directory overwritten by a file
    ],
)
def test_to_diff_refuses_path_conflicts(proposal):
    state = {**STATE, "skills/sub/inner.md": "i\n"}
    with pytest.raises(RefusalError) as info:
        skills_tree().to_diff(state, proposal, "w", 0, "skills")
    assert info.value.code == "path-conflict"


def test_to_diff_allows_replacing_a_file_by_a_directory_in_one_step():
    diff = skills_tree().to_diff(STATE, {"skills/a.md": None, "skills/a.md/x.md": "x"}, "w", 0, "s")
    assert diff is not None
    assert diff.apply(STATE) == {"skills/b.md": "b\n", "skills/a.md/x.md": "x"}


def test_to_diff_refuses_growing_past_max_files():
    tree = skills_tree(limits=FileTreeLimits(max_files=2))
    with pytest.raises(RefusalError) as info:
        tree.to_diff(STATE, {"skills/c.md": "c"}, "w", 0, "skills")
    assert (info.value.category, info.value.code) == ("oversized", "too-many-files")
    assert tree.to_diff(STATE, {"skills/c.md": "c", "skills/a.md": None}, "w", 0, "s") is not None


def test_diff_id_is_content_addressed():
    tree = skills_tree()
    one = tree.to_diff(STATE, {"skills/a.md": "new"}, "w1", 1, "skills")
    two = tree.to_diff(STATE, {"./skills/a.md": "new"}, "w2", 5, "skills")
    assert one is not None
    assert two is not None
    assert one.diff_id == two.diff_id
