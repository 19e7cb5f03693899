from __future__ import annotations

import math

import pytest

from agentdescent_core.errors import RefusalError
from agentdescent_core.governance import (
    FAST_MAX,
    RESERVED_L0_NAMES,
    FrozenSet,
    Layer,
    check_artifact_id,
    classify,
    compile_glob,
    layer_for,
)


@pytest.mark.parametrize(
    ("radius", "layer"),
    [
        (0.0, Layer.L2),
        (0.1, Layer.L2),
        (FAST_MAX, Layer.L2),
        (math.nextafter(FAST_MAX, 1.0), Layer.L1),
        (0.31, Layer.L1),
        (0.4, Layer.L1),
        (1.0, Layer.L1),
        (0, Layer.L2),
        (1, Layer.L1),
    ],
)
def test_classify_boundary_is_fast_max(radius, layer):
    assert classify(radius) is layer


def test_fast_max_value():
    assert FAST_MAX == 0.30


@pytest.mark.parametrize("radius", [-0.01, 1.01, math.nan, math.inf, -math.inf])
def test_classify_refuses_out_of_range(radius):
    with pytest.raises(ValueError, match="blast_radius"):
        classify(radius)


@pytest.mark.parametrize("radius", ["0.2", None, True])
def test_classify_refuses_non_numbers(radius):
    with pytest.raises(TypeError, match="blast_radius"):
        classify(radius)


@pytest.mark.parametrize("name", sorted(RESERVED_L0_NAMES))
def test_reserved_names_are_refused_with_rename_hint(name):
    with pytest.raises(RefusalError) as info:
        check_artifact_id(name)
    assert info.value.category == "invalid-proposal"
    assert info.value.code == "reserved-name"
    assert name in info.value.message
    assert "rename" in info.value.message


@pytest.mark.parametrize(
    "name", ["Oracle", "audit-budget", " merge permissions ", "SAFETY.constraints"]
)
def test_reserved_name_variants_are_refused(name):
    with pytest.raises(RefusalError, match="reserved"):
        check_artifact_id(name)


@pytest.mark.parametrize("name", ["oracle_prompt", "skills", "system_prompt", "oracles"])
def test_ordinary_names_pass(name):
    check_artifact_id(name)


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name_refused(name):
    with pytest.raises(RefusalError) as info:
        check_artifact_id(name)
    assert info.value.code == "empty-name"


def test_layer_for_reaches_l0_only_by_name():
    assert layer_for("oracle", 0.0) is Layer.L0
    assert layer_for("prompt", 0.0) is Layer.L2
    assert layer_for("prompt", 0.9) is Layer.L1


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # ** at the start
        ("**/test_*.py", "test_a.py", True),
        ("**/test_*.py", "skills/a/tests/test_x.py", True),
        ("**/test_*.py", "skills/a/helper_test.py", False),
        ("**/test_*.py", "skills/a/test_x.pyc", False),
        # ** in the middle
        ("skills/**/data.json", "skills/data.json", True),
        ("skills/**/data.json", "skills/a/b/c/data.json", True),
        ("skills/**/data.json", "other/a/data.json", False),
        ("skills/**/data.json", "skillsx/data.json", False),
        # ** at the end
        ("docs/**", "docs/a.md", True),
        ("docs/**", "docs/x/y/z.md", True),
        ("docs/**", "docsy/a.md", False),
        ("**", "anything/at/all.txt", True),
        # * stays inside one segment
        ("skills/*.md", "skills/a.md", True),
        ("skills/*.md", "skills/sub/a.md", False),
        ("*.md", "README.md", True),
        ("*.md", "docs/README.md", False),
        # ?
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file12.txt", False),
        ("a?b", "a/b", False),
        # character classes
        ("v[0-9].txt", "v3.txt", True),
        ("v[0-9].txt", "vx.txt", False),
        ("v[!0-9].txt", "vx.txt", True),
        ("v[!0-9].txt", "v3.txt", False),
        # directory patterns freeze everything under them
        ("tests", "tests/test_a.py", True),
        ("tests/", "tests/unit/test_a.py", True),
        ("tests", "tests", True),
        ("tests", "testsuite/a.py", False),
        ("tests", "skills/tests/a.py", False),
        ("skills/*/tests", "skills/a/tests/x.py", True),
        ("skills/*/tests", "skills/a/b/tests/x.py", False),
        ("./tests", "tests/a.py", True),
        # bracket expressions as git reads them: "]" first in a set is a member
        ("[]]", "]", True),
        ("[]]", "a", False),
        ("[!]]", "a", True),
        ("[!]]", "]", False),
        ("x[]y]", "xy", True),
        ("x[]y]", "x]", True),
        ("x[]y]", "x]y", False),
        ("[[]", "[", True),
        ("v[!0-9]/**", "vx/deep/file.md", True),
        # special regex characters are literal
        ("a+b.(x)", "a+b.(x)", True),
        ("a+b.(x)", "aab.(x)", False),
    ],
)
def test_compile_glob(pattern, path, expected):
    assert bool(compile_glob(pattern).fullmatch(path)) is expected


@pytest.mark.parametrize("pattern", ["", "/", "./", "../x", "a/../../b",
                                     # git's wildmatch matches nothing with an open "["
                                     "[z-a]", "[", "a[b"])
def test_bad_patterns_refused(pattern):
    with pytest.raises(ValueError, match="pattern"):
        FrozenSet([pattern])


def test_frozen_set_without_roots_freezes_only_patterns_files_and_conftest():
    fs = FrozenSet(["docs/**"], frozen_files=["tests/test_a.py"])
    assert fs.is_frozen("docs/a.md")
    assert fs.is_frozen("tests/test_a.py")
    assert fs.is_frozen("deep/down/conftest.py")
    assert not fs.is_frozen("tests/test_b.py")
    assert not fs.is_frozen("src/mod.py")


def test_frozen_set_with_roots_freezes_outside_and_tests_inside():
    fs = FrozenSet(["**/test_*.py"], artifact_roots=["skills", "AGENTS.md"])
    assert not fs.is_frozen("skills/a/SKILL.md")
    assert not fs.is_frozen("AGENTS.md")
    assert fs.is_frozen("skills/a/tests/test_x.py")
    assert fs.is_frozen("skills/a/conftest.py")
    assert fs.is_frozen("src/pkg/mod.py")
    assert fs.is_frozen("skillset/a.md")
    assert fs.is_frozen("AGENTS.md.bak")


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../outside", "skills/../../x", "C:/x", "a\x00b", ""]
)
def test_unreadable_paths_are_frozen(path):
    assert FrozenSet(artifact_roots=["skills"]).is_frozen(path)
    assert FrozenSet().is_frozen(path)


def test_frozen_file_freezes_directory_below_it():
    fs = FrozenSet(frozen_files=["skills/a/fixtures"])
    assert fs.is_frozen("skills/a/fixtures/x.json")
    assert not fs.is_frozen("skills/a/fixtures2/x.json")


def test_check_raises_frozen_violation_naming_reason():
    fs = FrozenSet(["skills/*/tests"], artifact_roots=["skills"])
    with pytest.raises(RefusalError) as info:
        fs.check("skills/a/tests/helper.py")
    assert info.value.category == "frozen-violation"
    assert info.value.code == "frozen-path"
    assert info.value.path == "skills/a/tests/helper.py"
    assert "skills/*/tests" in info.value.message
    with pytest.raises(RefusalError, match="outside the artifact paths"):
        fs.check("README.md")
    fs.check("skills/a/SKILL.md")


def test_with_files_adds_collected_modules_and_keeps_the_rest():
    base = FrozenSet(["docs"], artifact_roots=["skills"])
    extended = base.with_files(["skills/a/check_agent.py"])
    assert extended.is_frozen("skills/a/check_agent.py")
    assert not base.is_frozen("skills/a/check_agent.py")
    assert extended.patterns == ("docs",)
    assert extended.artifact_roots == ("skills",)


@pytest.mark.parametrize("root", [".", "", "../x", "/abs", "skills/*"])
def test_bad_roots_refused(root):
    with pytest.raises(ValueError, match="artifact root"):
        FrozenSet(artifact_roots=[root])


def test_normalised_inputs():
    fs = FrozenSet(["./docs/", "docs"], artifact_roots=["./skills/"], frozen_files=["./t.py"])
    assert fs.patterns == ("docs",)
    assert fs.artifact_roots == ("skills",)
    assert fs.frozen_files == frozenset({"t.py"})
    assert not fs.is_frozen("./skills/a.md")
