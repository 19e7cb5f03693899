from __future__ import annotations

import pytest

from agentdescent_core.artifacts.paths import (
    EXECUTABLE_CONFIG_NAMES,
    is_executable_config,
    is_inside,
    normalise_path,
    normalise_root,
    shown_path,
    validate_file_path,
)
from agentdescent_core.errors import RefusalError


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("skills/a/SKILL.md", "skills/a/SKILL.md"),
        ("./skills/a/SKILL.md", "skills/a/SKILL.md"),
        ("skills//a/./SKILL.md", "skills/a/SKILL.md"),
        ("skills\\a\\SKILL.md", "skills/a/SKILL.md"),
        ("AGENTS.md", "AGENTS.md"),
        ("skills/a..b/c.md", "skills/a..b/c.md"),
        ("skills/...", "skills/..."),
        ("skills/ünïcode.md", "skills/ünïcode.md"),
    ],
)
def test_normalise_path(raw, normal):
    assert normalise_path(raw) == normal


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("/etc/passwd", "absolute-path"),
        ("\\windows\\system32", "absolute-path"),
        ("\\\\server\\share\\x", "absolute-path"),
        ("C:\\Users\\x", "absolute-path"),
        ("c:/x", "absolute-path"),
        ("D:relative", "absolute-path"),
        ("../x", "parent-traversal"),
        ("skills/../../x", "parent-traversal"),
        ("skills\\..\\..\\x", "parent-traversal"),
        ("skills/..", "parent-traversal"),
        ("a\x00b", "nul-byte"),
        ("a\nb", "control-character"),
        ("a\tb", "control-character"),
        ("", "empty-path"),
        (".", "empty-path"),
        ("./", "empty-path"),
        ("//", "absolute-path"),
        (".git/config", "git-internal"),
        ("skills/.git/hooks/pre-commit", "git-internal"),
        ("skills/.GIT/x", "git-internal"),
    ],
)
def test_normalise_path_refusals(raw, code):
    with pytest.raises(RefusalError) as info:
        normalise_path(raw)
    assert info.value.code == code
    assert info.value.category == "invalid-proposal"
    # the name as it may be shown anywhere: control characters escaped, valid UTF-8
    assert info.value.path == shown_path(raw)
    assert f"'{shown_path(raw)}'" in info.value.message


def test_non_string_path_refused():
    with pytest.raises(RefusalError) as info:
        normalise_path(None)  # type: ignore[arg-type]
    assert info.value.code == "empty-path"


@pytest.mark.parametrize("name", sorted(EXECUTABLE_CONFIG_NAMES))
@pytest.mark.parametrize("prefix", ["", "skills/", "skills/a/deep/"])
def test_executable_config_refused_at_any_depth(name, prefix):
    path = prefix + name
    assert is_executable_config(path)
    with pytest.raises(RefusalError) as info:
        validate_file_path(path)
    assert info.value.category == "invalid-proposal"
    assert info.value.code == "executable-config"
    assert path in info.value.message


@pytest.mark.parametrize(
    "path", ["x.pth", "skills/evil.PTH", "skills/Conftest.py", "PyProject.toml"]
)
def test_executable_config_case_and_suffix(path):
    with pytest.raises(RefusalError, match="execute"):
        validate_file_path(path)


@pytest.mark.parametrize(
    "path",
    ["skills/conftest.py.md", "skills/my_conftest.py", "skills/pth.txt", "skills/setup.py.txt"],
)
def test_similar_names_are_fine(path):
    assert not is_executable_config(path)
    assert validate_file_path(path) == path


@pytest.mark.parametrize("path", ["skills/a/", "skills\\a\\"])
def test_directory_path_refused(path):
    with pytest.raises(RefusalError) as info:
        validate_file_path(path)
    assert info.value.code == "directory-path"


@pytest.mark.parametrize("root", [".", "./", ""])
def test_repository_root_is_not_an_artifact_root(root):
    with pytest.raises(RefusalError, match="repository root"):
        normalise_root(root)


def test_normalise_root_accepts_dirs_and_files():
    assert normalise_root("skills/") == "skills"
    assert normalise_root("./AGENTS.md") == "AGENTS.md"


@pytest.mark.parametrize(
    ("path", "roots", "inside"),
    [
        ("skills/a.md", ["skills"], True),
        ("skills", ["skills"], True),
        ("skillset/a.md", ["skills"], False),
        ("AGENTS.md", ["skills", "AGENTS.md"], True),
        ("AGENTS.md/x", ["AGENTS.md"], True),
        ("docs/a.md", [], False),
    ],
)
def test_is_inside(path, roots, inside):
    assert is_inside(path, roots) is inside
