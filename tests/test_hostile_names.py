"""Hostile file names never end the run: refused from proposals, escaped when a run made them.

A candidate's script once created ``skills/\\xff\\xfe/conftest.py`` (a name that is
not UTF-8): the frozen-file check reported it with surrogate escapes in the
message, SQLite refused to store that verdict, and the whole ``pytest --evolve``
died with INTERNALERROR (exit 3, no report).  The run tests below are that
attack, under every backend, as a user runs it (``python -m pytest --evolve`` in
a temporary git repository with a conftest proposer); the rest pin the name
rules of proposals — not UTF-8, NUL, control characters, names over NAME_MAX,
long paths, names that differ only in case — and the escaping used wherever a
name read from disk is shown.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import user_git, write
from sandbox_support import ALL_BACKENDS, require_backend
from test_session_runs import evolve, explain, messages, report_of

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.artifacts.paths import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    normalise_path,
    shown_path,
)
from agentdescent_core.errors import RefusalError
from agentdescent_core.sandbox.frozencheck import FrozenCheck, Violation

ACT = "skills/support/act.py"

TESTS = '''\
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.evolve
@pytest.mark.parametrize("case", range(3))
def test_greets(case):
    done = subprocess.run([sys.executable, str(ROOT / "skills/support/act.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip().splitlines()[-1:] == ["hello"], "say hello"
'''

#: The first proposal plants a non-UTF-8 directory holding a conftest.py (and a
#: file whose name carries a newline and an escape character) and then answers
#: right; the second is the clean fix, which must still be accepted.
BAD_NAME_PROPOSER = '''\
HOSTILE = """import os
root = os.fsencode(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
bad = os.path.join(root, b"\\\\xff\\\\xfe")
os.makedirs(bad, exist_ok=True)
with open(os.path.join(bad, b"conftest.py"), "w") as handle:
    handle.write("x = 1\\\\n")
with open(os.path.join(os.path.dirname(root), b"notes\\\\n\\\\x1b[31m.md"), "w") as handle:
    handle.write("x\\\\n")
print("hello")
"""
CLEAN = 'print("hello")\\n'
CALLS = []


def pytest_evolve_propose(context):
    CALLS.append(context.worker)
    text = context.files["skills/support/act.py"]
    if len(CALLS) == 1:
        return {"skills/support/act.py": HOSTILE}
    if text != CLEAN:
        return {"skills/support/act.py": CLEAN}
    return None
'''


def make_repo(path: Path, proposer: str, ini: str = "") -> None:
    path.mkdir(parents=True)
    user_git(path, "init", "--quiet", "--initial-branch=main")
    write(path / ACT, 'print("hi")\n')
    write(path / "skills/support/SKILL.md", "# Support\n\nRun act.py.\n")
    write(path / "tests/test_bot.py", TESTS)
    write(path / "conftest.py", proposer)
    write(path / "pytest.ini", "[pytest]\n" + ini)
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "the agent")


def run_evolve(repo: Path, sandbox: str, *args: str) -> subprocess.CompletedProcess[str]:
    return evolve(repo, "--evolve-sandbox", sandbox, "--evolve-workers", "1",
                  "--evolve-repeats", "1", *args, timeout=900)


# ---------------------------------------------------------------- a candidate's run


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_non_utf8_name_made_by_a_script_is_a_violation_not_an_internal_error(
        tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    repo = tmp_path / "agent"
    make_repo(repo, BAD_NAME_PROPOSER)
    outside = set(os.listdir(tmp_path))

    result = run_evolve(repo, backend, "--evolve-rounds", "3")

    assert result.returncode in (0, 1), explain(result)  # never 3 (INTERNALERROR)
    assert "INTERNALERROR" not in result.stdout + result.stderr, explain(result)
    report = report_of(repo)
    assert report["error"] is None, report["error"]
    assert report["outcomes"].get("frozen-violation") == 1, report["outcomes"]
    found = [m for m in messages(report) if m.startswith("frozen-violation")]
    assert len(found) == 1, messages(report)
    # the name is shown escaped, as valid UTF-8, with its category
    assert "skills/\\xff\\xfe/conftest.py (added)" in found[0], found[0]
    # the clean candidate afterwards still scores as it should, and is committed
    assert report["outcomes"].get("committed") == 1, report["outcomes"]
    assert report["reward_after"] == 1.0
    assert user_git(repo, "show", f"agentdescent/dev:{ACT}") == 'print("hello")'
    # nothing of the hostile run reached the user's checkout or git history
    assert not os.path.lexists(os.fsencode(repo / "skills") + b"/\xff\xfe")
    names = user_git(repo, "log", "--all", "--name-only", "--format=")
    assert "conftest.py" not in [n for n in names.splitlines() if n.startswith("skills/")]
    if backend != "local":  # the sibling file was written outside the repository
        assert set(os.listdir(tmp_path)) == outside


# ---------------------------------------------------------------- proposals

HOSTILE_NAMES: list[tuple[str, str]] = [
    ("skills/\udcff\udcfe/conftest.md", "not-utf8-name"),
    ("skills/" + "n" * (MAX_NAME_BYTES + 1) + ".md", "name-too-long"),
    ("skills/" + "/".join(["d" * 200] * 6) + "/x.md", "path-too-long"),
    ("skills/a\x00b.md", "nul-byte"),
    ("skills/notes\n.md", "control-character"),
    ("skills/\x1b[31mred.md", "control-character"),
]

NAMES_PROPOSER = '''\
EDITS = [
    {"skills/\\udcff\\udcfe/conftest.md": "x\\n"},
    {"skills/" + "n" * 256 + ".md": "x\\n"},
    {"skills/support/skill.md": "# lower case twin\\n"},
    {"skills/support/Notes.md": "a\\n", "skills/support/notes.md": "b\\n"},
    {"skills/notes\\n.md": "x\\n"},
    {"skills/support/act.py": 'print("hello")\\n'},
]
CALLS = []


def pytest_evolve_propose(context):
    CALLS.append(context.worker)
    if len(CALLS) <= len(EDITS):
        return EDITS[len(CALLS) - 1]
    return None
'''


@pytest.mark.slow
def test_hook_proposals_with_hostile_names_are_refused_and_the_run_goes_on(
        tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_repo(repo, NAMES_PROPOSER)

    result = run_evolve(repo, "local", "--evolve-rounds", "6")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["outcomes"].get("invalid-proposal") == 5, report["outcomes"]
    assert report["outcomes"].get("committed") == 1, report["outcomes"]
    shown = "\n".join(messages(report))
    for code in ("not-utf8-name", "name-too-long", "case-collision", "control-character"):
        assert f"({code})" in shown, shown
    assert "skills/\\xff\\xfe/conftest.md" in shown
    assert "skills/notes\\n.md" in shown
    assert "'skills/support/SKILL.md' only in case" in shown
    listed = user_git(repo, "ls-tree", "-r", "--name-only", "agentdescent/dev")
    assert listed.splitlines() == ["conftest.py", "pytest.ini", "skills/support/SKILL.md",
                                   ACT, "tests/test_bot.py"]


@pytest.mark.parametrize(("path", "code"), HOSTILE_NAMES)
def test_a_hostile_name_is_refused_with_the_name_escaped(path: str, code: str) -> None:
    with pytest.raises(RefusalError) as info:
        normalise_path(path)
    refusal = info.value
    assert (refusal.category, refusal.code) == ("invalid-proposal", code)
    for text in (refusal.message, refusal.path or ""):
        text.encode("utf-8")  # strict: storable in SQLite, JSON and git
        assert not set(text) & {"\n", "\x00", "\x1b"}


def test_names_at_the_limits_are_accepted() -> None:
    name = "skills/" + "n" * (MAX_NAME_BYTES - 3) + ".md"
    assert normalise_path(name) == name
    deep = "skills/" + "/".join(["d" * 100] * ((MAX_PATH_BYTES - 20) // 101)) + "/x.md"
    assert len(deep.encode()) <= MAX_PATH_BYTES
    assert normalise_path(deep) == deep
    assert normalise_path("skills/résumé/ünïcode.md") == "skills/résumé/ünïcode.md"


def test_names_differing_only_in_case_are_refused_in_one_proposal_and_against_the_state(
        ) -> None:
    tree = FileTree(["skills"])
    state = {"skills/a/SKILL.md": "# A\n"}
    cases = [
        {"skills/b/SKILL.md": "x\n", "skills/b/skill.md": "y\n"},  # both in one proposal
        {"skills/a/skill.md": "twin\n"},  # against a file already there
        {"skills/A/other.md": "x\n"},  # a folder spelled two ways
    ]
    for ops in cases:
        with pytest.raises(RefusalError) as info:
            tree.to_diff(state, ops, "w", 0)
        assert info.value.code == "case-collision", ops
    # a rename that changes only the case is one file before and after: fine
    diff = tree.to_diff(state, {"skills/a/SKILL.md": None, "skills/a/skill.md": "# A\n"}, "w", 0)
    assert diff is not None
    # a pair the repository already holds (a Linux checkout may) does not block edits
    twins = {"skills/x/README.md": "a\n", "skills/x/readme.md": "b\n"}
    assert tree.to_diff(twins, {"skills/x/readme.md": "c\n"}, "w", 0) is not None


def test_shown_path_escapes_what_a_terminal_or_sqlite_cannot_take() -> None:
    raw = os.fsdecode(b"skills/\xff\xfe/conftest.py")
    assert shown_path(raw) == "skills/\\xff\\xfe/conftest.py"
    assert shown_path("a\nb\tc\x1b[0m\x7f") == "a\\nb\\tc\\x1b[0m\\x7f"
    assert shown_path("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    assert shown_path("skills/résumé.md") == "skills/résumé.md"  # valid text is left alone


def test_a_frozen_violation_on_a_bad_name_has_a_storable_message() -> None:
    raw = os.fsdecode(b"skills/\xff\xfe/conftest.py")
    check = FrozenCheck([Violation(raw, "added"), Violation("tests/a\nb.py", "modified")],
                        [], 0.0)
    refusal = check.violations_error()
    refusal.message.encode("utf-8")
    assert "skills/\\xff\\xfe/conftest.py (added)" in refusal.message
    assert "tests/a\\nb.py (modified)" in refusal.message
    assert refusal.path == "skills/\\xff\\xfe/conftest.py"
    assert check.violations[0].path == raw  # the disk name is kept for the restore


def test_a_bad_name_violation_is_stored_in_the_eval_cache(tmp_path: Path) -> None:
    """The exact crash: ``put_verdict`` of a violation made from a non-UTF-8 name."""
    from agentdescent_core.evaluation.cache import EvalCache, Verdict

    check = FrozenCheck([Violation(os.fsdecode(b"skills/\xff/conftest.py"), "added")], [], 0.0)
    refusal = check.violations_error()
    cache = EvalCache(tmp_path / "cache.sqlite3")
    try:
        cache.put_verdict("a" * 64, "c" * 64, Verdict("frozen-violation", refusal.message,
                                                       refusal.code))
    finally:
        cache.close()
