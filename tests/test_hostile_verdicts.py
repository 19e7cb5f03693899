"""Forged verdicts, forged cache rows and leaked secrets, under every backend.

The skill here is a module the test *imports* (``skills/greeter/helper.py``),
so candidate code runs inside the child pytest that judges it.  Each attack
answers wrong and then tries to be credited anyway — by patching the
recorder or pytest, or by reading the expected value out of the test's frame;
each must come back as a ``tamper`` verdict (every reward 0.0), and the clean
skill must score 1.0 in the same workspace afterwards.  A suite that uses
pytest's own introspection (fixtures, parametrize, assertion rewriting, a
conftest calling ``sys._getframe``) must not be flagged.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import user_git, write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend

from agentdescent_core.artifacts.filetree import FileTree, state_hash
from agentdescent_core.evaluation.cache import EvalCache, run_key
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
from agentdescent_core.governance import FrozenSet
from agentdescent_core.redact import Redactor, redact_data
from agentdescent_core.sandbox.spec import Limits

TASK = "tests/test_greeter.py::test_greets"
HELPER = "skills/greeter/helper.py"
SKILL = "skills/greeter/SKILL.md"
API_KEY = "sk-ant-" + "Q7" * 20

TEST_GREETER = '''\
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "skills/greeter"))
import helper  # noqa: E402


@pytest.mark.evolve
def test_greets():
    expected = "hello " + "world"
    assert helper.greet() == expected
'''

CLEAN = 'def greet():\n    return "hello world"\n'
WRONG = 'def greet():\n    return "goodbye"\n'

ATTACKS: dict[str, str] = {
    # The one seen in issue 14: every test passed.
    "patch-combine-reports": '''\
import sys
recorder = sys.modules["pytest_agentdescent.recorder"]
real = recorder.combine_reports
def forged(nodeid, repeat, reports, **kw):
    line = real(nodeid, repeat, reports, **kw)
    line.update(outcome="passed", reward=1.0, message="")
    return line
recorder.combine_reports = forged
def greet():
    return "goodbye"
''',
    # The signing moved to the shared journal module: rewriting a record on its
    # way to the signature must be tamper too, not a signed "passed".
    "patch-journal-encoder": '''\
import sys
journal = sys.modules["agentdescent_core.evaluation.journal"]
real = journal._dumps
def forged(obj, **kw):
    if isinstance(obj, dict) and "outcome" in obj:
        obj = {**obj, "outcome": "passed", "reward": 1.0, "message": ""}
    return real(obj, **kw)
journal._dumps = forged
journal.sign_line = lambda data, key: real({**data, "outcome": "passed"})
def greet():
    return "goodbye"
''',
    "patch-pytest-runtest": '''\
import _pytest.python
_pytest.python.Function.runtest = lambda self: None
def greet():
    return "goodbye"
''',
    "read-caller-frame": '''\
import sys
def greet():
    return sys._getframe(1).f_locals["expected"]
''',
    "inspect-currentframe": '''\
import inspect
def greet():
    return inspect.currentframe().f_back.f_locals["expected"]
''',
    "traceback-frame": '''\
def greet():
    try:
        raise RuntimeError
    except RuntimeError as exc:
        return exc.__traceback__.tb_frame.f_back.f_locals["expected"]
''',
    "generator-frame": '''\
def _gen():
    yield
def greet():
    g = _gen()
    return g.gi_frame.f_back and "hello world"
''',
    "gc-referrers": '''\
import gc
def greet():
    for obj in gc.get_referrers(greet):
        pass
    return "hello world"
''',
    "ctypes-memory": '''\
import ctypes
def greet():
    ctypes.string_at(id(greet), 16)
    return "hello world"
''',
}


def make_repo(path: Path, test_text: str = TEST_GREETER, extra: dict[str, str] | None = None
              ) -> str:
    user_git(path.parent, "init", "--quiet", "--initial-branch=main", path.name)
    write(path / "pytest.ini", "[pytest]\ntestpaths = tests\nevolve_paths = skills\n"
                               "evolve_sandbox = local\n")
    write(path / SKILL, "# Greeter\n")
    write(path / HELPER, CLEAN)
    write(path / "tests/test_greeter.py", test_text)
    for rel, text in (extra or {}).items():
        write(path / rel, text)
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "agent repo")
    return user_git(path, "rev-parse", "HEAD")


def state(helper: str) -> dict[str, str]:
    return {SKILL: "# Greeter\n", HELPER: helper}


def host_env() -> dict[str, str]:
    """What the controller's environment holds: a PATH and a model key (passed on purpose).

    No GITHUB_TOKEN: ``local`` refuses to run while one is set.
    """
    import os

    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ANTHROPIC_API_KEY": API_KEY}


def make_verifier(name: str, repo: Path, commit: str, cache: EvalCache | None,
                  tasks: tuple[str, ...] = (TASK,)) -> SandboxedVerifier:
    tree = FileTree(["skills"])
    return SandboxedVerifier(
        repo, commit, TaskSplit(train=tasks), tree=tree,
        frozen=FrozenSet(artifact_roots=tree.roots), backend=require_backend(name),
        cache=cache, network="default" if name == "local" else "none",
        limits=Limits(memory_mb=1024, max_processes=64, cpu_seconds=60),
        test_timeout=30.0, run_timeout=120.0, host_env=host_env(), pytest_args=child_pytest_args(),
    )


@pytest.fixture(scope="module", params=ALL_BACKENDS)
def verifier(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxedVerifier]:
    name = str(request.param)
    require_backend(name)
    repo = tmp_path_factory.mktemp(f"verdict-{name}") / "repo"
    commit = make_repo(repo)
    cache = EvalCache(tmp_path_factory.mktemp(f"vcache-{name}") / "eval.sqlite3",
                      key=run_key() if name == "local" else None)
    verifier = make_verifier(name, repo, commit, cache)
    yield verifier
    verifier.close()
    cache.close()


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_forged_verdict_is_tamper(attack: str, verifier: SandboxedVerifier) -> None:
    candidate = state(ATTACKS[attack] + f"# {attack} {uuid.uuid4().hex}\n")

    samples = verifier.evaluate(candidate, [TASK], 1)

    refusal = verifier.disqualification(candidate)
    shown = "\n".join(f"{r.outcome} {r.message}" for r in verifier.records(candidate, TASK))
    assert refusal is not None, f"{attack} under {verifier.backend.name} went unnoticed:\n{shown}"
    assert refusal.category == "tamper"
    assert HELPER in refusal.message, refusal.message
    assert samples.rewards[TASK] == (0.0,)
    assert verifier.rollout(candidate, TASK).reward == 0.0
    # The verdict is cached: asked again, nothing runs and the answer stands.
    runs = verifier.usage()["children"]
    assert verifier.evaluate(candidate, [TASK], 1).rewards[TASK] == (0.0,)
    assert verifier.usage()["children"] == runs

    again = verifier.evaluate(state(CLEAN + f"# after {attack}\n"), [TASK], 1)
    assert again.rewards[TASK] == (1.0,), attack


def test_a_wrong_answer_without_tricks_is_only_a_failure(verifier: SandboxedVerifier) -> None:
    candidate = state(WRONG)
    assert verifier.evaluate(candidate, [TASK], 1).rewards[TASK] == (0.0,)
    assert verifier.disqualification(candidate) is None


# ---------------------------------------------------------------- no false positives

PYTEST_FEATURES = '''\
import collections
import dataclasses
import enum
import inspect
import logging
import sys
import traceback
import typing

import pytest

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/skills/greeter")
import helper  # noqa: E402

Point = collections.namedtuple("Point", "x y")
T = typing.TypeVar("T")
Color = enum.Enum("Color", "RED GREEN")


@dataclasses.dataclass
class Box:
    size: int


@pytest.fixture
def box(request):
    assert inspect.currentframe() is not None
    return Box(len(request.node.name))


@pytest.mark.evolve
@pytest.mark.parametrize("n", [1, 2])
def test_features(box, n, caller_file, capsys):
    logging.getLogger("t").warning("logged %s", n)
    try:
        raise ValueError("inside the test")
    except ValueError:
        traceback.format_exc()
    assert helper.describe(n) == f"{n} hello world"
    assert Point(1, 2).x == 1 and box.size > 0
    assert caller_file.endswith("test_greeter.py")
    with pytest.raises(ZeroDivisionError):
        helper.divide(1, 0)
'''

# Skill code that uses the standard library's introspecting helpers the usual way.
HONEST_HELPER = '''\
import collections
import logging
import traceback
import typing

Pair = collections.namedtuple("Pair", "a b")
U = typing.TypeVar("U")
log = logging.getLogger("skill")


def greet():
    return "hello world"


def describe(n):
    log.info("describing %s", n)
    try:
        {}[n]
    except KeyError:
        traceback.format_exc()
        log.exception("not there")
    return f"{Pair(n, 0).a} {greet()}"


def divide(a, b):
    return a / b
'''

CONFTEST = '''\
import inspect
import sys

import pytest


@pytest.fixture
def caller_file(request):
    frame = sys._getframe(0)
    assert inspect.stack()[0].frame is not None
    return request.node.fspath.strpath if frame else ""
'''


@pytest.mark.parametrize("name", ALL_BACKENDS)
def test_pytest_features_and_honest_introspection_are_not_tamper(
    name: str, tmp_path: Path
) -> None:
    require_backend(name)
    repo = tmp_path / "repo"
    commit = make_repo(repo, PYTEST_FEATURES,
                       extra={"tests/conftest.py": CONFTEST})
    tasks = ("tests/test_greeter.py::test_features[1]", "tests/test_greeter.py::test_features[2]")
    verifier = make_verifier(name, repo, commit, None, tasks)
    try:
        candidate = state(HONEST_HELPER)
        samples = verifier.evaluate(candidate, list(tasks), 1)
        shown = "\n".join(f"{r.outcome} {r.message}" for t in tasks
                          for r in verifier.records(candidate, t))
        assert verifier.disqualification(candidate) is None, shown
        assert dict(samples.rewards) == {t: (1.0,) for t in tasks}, shown
    finally:
        verifier.close()


# ---------------------------------------------------------------- secrets by value

LEAKER = '''\
import base64
import os
import sys

KEY = os.environ.get("ANTHROPIC_API_KEY", "")
print("plain", KEY)
print("b64", base64.b64encode(KEY.encode()).decode())
print("hex", KEY.encode().hex(), file=sys.stderr)


def greet():
    return KEY
'''


@pytest.mark.parametrize("name", ALL_BACKENDS)
def test_a_secret_the_child_prints_is_stored_nowhere(name: str, tmp_path: Path) -> None:
    require_backend(name)
    repo = tmp_path / "repo"
    commit = make_repo(repo)
    cache_path = tmp_path / "state" / "eval.sqlite3"
    cache = EvalCache(cache_path, key=run_key())
    verifier = make_verifier(name, repo, commit, cache)
    try:
        candidate = state(LEAKER)
        assert verifier.evaluate(candidate, [TASK], 1).rewards[TASK] == (0.0,)
        records = verifier.records(candidate, TASK)
        text = json.dumps([r.message + r.output for r in records])
        observation = verifier.rollout(candidate, TASK).output
    finally:
        verifier.close()
        cache.close()
    forms = (API_KEY, base64.b64encode(API_KEY.encode()).decode().rstrip("="),
             API_KEY.encode().hex())
    assert "[REDACTED:ANTHROPIC_API_KEY]" in text, text  # it was printed, and masked
    for form in forms:
        assert form not in text
        assert form not in observation.record.message + observation.record.output
    stored = b"".join(p.read_bytes() for p in cache_path.parent.iterdir() if p.is_file())
    for form in forms:
        assert form.encode() not in stored
    report = redact_data({"failures": [r.message for r in records], "note": f"key {API_KEY}"},
                         Redactor({"ANTHROPIC_API_KEY": API_KEY}))
    assert API_KEY not in json.dumps(report)


def test_report_commit_and_pr_body_are_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentdescent_core.github.body import render_pr_body
    from agentdescent_core.report import render_markdown

    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("SHORT_TOKEN", "abc123")  # under 8 characters: never scrubbed
    body = render_pr_body(None, ledger_versions=[], diffstat=[(f"skills/{API_KEY}.md", 1, 0)],
                          review_command=f"agentdescent review # {API_KEY} abc123")
    assert API_KEY not in body
    assert "[REDACTED:ANTHROPIC_API_KEY]" in body
    assert "abc123" in body
    markdown = render_markdown({"split": {}, "failures": [API_KEY]})
    assert API_KEY not in markdown


# ---------------------------------------------------------------- the eval cache's MAC

def test_a_rewritten_cache_row_is_ignored_and_rerun(tmp_path: Path) -> None:
    require_backend("local")
    repo = tmp_path / "repo"
    commit = make_repo(repo)
    cache_path = tmp_path / "state" / "eval.sqlite3"
    cache = EvalCache(cache_path, key=run_key())
    wrong = state(WRONG)
    first = make_verifier("local", repo, commit, cache)
    try:
        assert first.evaluate(wrong, [TASK], 1).rewards[TASK] == (0.0,)
        context = first.cache_context
    finally:
        first.close()
    # What a script under local can do: the cache file is the user's to write.
    with sqlite3.connect(cache_path) as db:
        (text,) = db.execute("SELECT record FROM records").fetchone()
        forged = {**json.loads(text), "outcome": "passed", "reward": 1.0, "message": ""}
        db.execute("UPDATE records SET record = ?", (json.dumps(forged, sort_keys=True),))
        clean = state(CLEAN)
        db.execute("INSERT INTO verdicts VALUES (?, ?, 'frozen-violation', 'x', 'forged', "
                   "'00', 0)", (state_hash(clean), context))
    second = make_verifier("local", repo, commit, cache)
    try:
        assert second.evaluate(wrong, [TASK], 1).rewards[TASK] == (0.0,)
        assert second.evaluations == 1  # the forged row was not used: the test ran again
        assert second.evaluate(clean, [TASK], 1).rewards[TASK] == (1.0,)
        assert second.disqualification(clean) is None
        assert cache.rejected >= 2
    finally:
        second.close()
        cache.close()


def test_the_cache_key_file_is_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "state" / "eval.sqlite3"
    with EvalCache(path) as cache:
        key = cache._key
    key_path = Path(f"{path}.key")
    assert key_path.stat().st_mode & 0o777 == 0o600
    with EvalCache(path) as again:
        assert again._key == key
    with EvalCache(path, key=run_key()) as other:
        assert other._key != key


# ---------------------------------------------------------------- agentdescent review

def test_review_of_a_forged_head_fails_as_tamper(tmp_path: Path) -> None:
    from pytest_agentdescent.reviewing import review

    repo = tmp_path / "repo"
    make_repo(repo)
    user_git(repo, "checkout", "--quiet", "-b", "forged")
    write(repo / HELPER, ATTACKS["patch-combine-reports"])
    user_git(repo, "commit", "--quiet", "-am", "forged")
    user_git(repo, "checkout", "--quiet", "main")

    result = review(repo, "main", "forged", repeats=1, sandbox="local")

    text = "\n".join(result.failures)
    assert "tampered with the test process (tamper)" in text, text
    assert HELPER in text
