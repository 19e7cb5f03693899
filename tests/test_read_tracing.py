"""What each test read under the artifact roots (``TestRecord.reads``), through real children.

Every test here writes a small repository into ``tmp_path`` (a ``skills/`` root
and test modules) and evaluates it with ``run_tests``: a real child pytest with
the recorder and its :class:`~pytest_agentdescent.readtrace.ReadTracer`, under
the ``local`` backend and, in the slow test, under ``bwrap`` and ``docker`` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import write
from sandbox_support import ALL_BACKENDS, child_pytest_args, require_backend

from agentdescent_core.evaluation.child import ChildConfig, ChildOutcome, run_tests
from agentdescent_core.sandbox.spec import Backend

SKILLS = ("a", "b", "c", "d")

READS = '''\
import os
import subprocess
import sys
from pathlib import Path

AT_IMPORT = Path("skills/d/SKILL.md").read_text()  # a collection-time read


def test_in_process():
    assert open("skills/a/SKILL.md").read() == "# a\\n"


def test_python_subprocess():
    code = "assert open('skills/b/SKILL.md').read() == '# b\\\\n'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cat():
    subprocess.run(["cat", "skills/b/SKILL.md"], check=True, stdout=subprocess.DEVNULL)


def test_listdir():
    assert sorted(os.listdir("skills")) == ["a", "b", "c", "d"]
    Path("skills/added.md").write_text("added by the test\\n")


def test_nothing():
    pass


def test_through_a_symlink():
    assert open("linked/SKILL.md").read() == "# a\\n"
'''

FIXTURE = '''\
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def shared():
    return Path("skills/c/SKILL.md").read_text()


def test_before():
    pass


def test_uses(shared):
    assert shared == "# c\\n"


def test_after():
    pass


class TestGroup:
    @pytest.fixture(scope="class")
    def grouped(self):
        return Path("skills/a/SKILL.md").read_text()

    def test_in_class(self, grouped):
        pass

    def test_in_class_too(self):
        pass
'''

PLAIN = '''\
def test_plain():
    pass


def test_cheat():
    from pytest_agentdescent import readtrace

    readtrace.ReadTracer.end = lambda self, chain: []
'''

R, F, P = "tests/test_reads.py::", "tests/test_fixture.py::", "tests/test_plain.py::"
D = "skills/d/SKILL.md"  # what test_reads.py reads at import: every test in its child


def repository(root: Path) -> Path:
    ws = root / "ws"
    for name in SKILLS:
        write(ws / "skills" / name / "SKILL.md", f"# {name}\n")
    write(ws / "tests/test_reads.py", READS)
    write(ws / "tests/test_fixture.py", FIXTURE)
    write(ws / "tests/test_plain.py", PLAIN)
    (ws / "linked").symlink_to("skills/a")  # outside the root, into it
    return ws


def evaluate(root: Path, tests: Sequence[str], *, backend: Backend | None = None,
             trace: bool = True, roots: Sequence[str] = ("skills",)) -> ChildOutcome:
    ws = repository(root)
    backend = backend or require_backend("local")
    config = ChildConfig(backend=backend, trace_reads=trace, test_timeout=30.0,
                         run_timeout=120.0, pytest_args=child_pytest_args(),
                         network="default" if backend.name == "local" else "none")
    outcome = run_tests(ws, {test: (0, 1) for test in tests}, config,
                        scratch=root / "scratch", state_dir=root / "state",
                        writable=[ws / name for name in roots])
    assert outcome.error is None, outcome.error
    return outcome


def reads(outcome: ChildOutcome) -> dict[str, tuple[str, ...] | None]:
    failed = [r for r in outcome.records if r.outcome != "passed"]
    assert not failed, failed
    assert not outcome.tamper, outcome.tamper  # the tracer's own ctypes use is not flagged
    return {r.nodeid.split("::", 1)[1]: r.reads for r in outcome.records}


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, ...] | None]:
    tests = [R + name for name in ("test_in_process", "test_python_subprocess", "test_cat",
                                   "test_listdir", "test_nothing", "test_through_a_symlink")]
    tests += [F + name for name in ("test_before", "test_uses", "test_after",
                                    "TestGroup::test_in_class", "TestGroup::test_in_class_too")]
    return reads(evaluate(tmp_path_factory.mktemp("traced"), tests))


def test_an_in_process_open_is_the_tests_read(traced: dict[str, tuple[str, ...] | None]
                                              ) -> None:
    assert traced["test_in_process"] == ("skills/a/SKILL.md", D)


def test_a_read_through_a_symlink_is_of_the_file_it_leads_to(
        traced: dict[str, tuple[str, ...] | None]) -> None:
    assert traced["test_through_a_symlink"] == ("skills/a/SKILL.md", D)


def test_a_subprocess_read_is_the_tests_read(traced: dict[str, tuple[str, ...] | None]) -> None:
    assert traced["test_python_subprocess"] == ("skills/b/SKILL.md", D)
    assert traced["test_cat"] == ("skills/b/SKILL.md", D)


def test_a_listing_is_the_directory_with_a_slash(traced: dict[str, tuple[str, ...] | None]
                                                 ) -> None:
    # The file the test wrote was opened too; a file that is new is no trouble.
    assert traced["test_listdir"] == ("skills/", "skills/added.md", D)


def test_collection_reads_go_to_every_test(traced: dict[str, tuple[str, ...] | None]) -> None:
    assert traced["test_nothing"] == (D,)
    assert all(D in (found or ()) for found in traced.values())  # test_fixture.py's too


def test_a_module_fixture_read_goes_to_the_tests_that_share_it(
        traced: dict[str, tuple[str, ...] | None]) -> None:
    assert traced["test_before"] == (D,)  # ran before the fixture was set up
    assert traced["test_uses"] == ("skills/c/SKILL.md", D)
    assert traced["test_after"] == ("skills/c/SKILL.md", D)
    # a class fixture: to the tests of that class (the module's reads apply there too)
    for name in ("TestGroup::test_in_class", "TestGroup::test_in_class_too"):
        assert traced[name] == ("skills/a/SKILL.md", "skills/c/SKILL.md", D)
    # ...and to no test of another module
    assert all("skills/c/SKILL.md" not in (traced[name] or ())
               for name in ("test_in_process", "test_nothing", "test_listdir"))


def test_a_test_that_read_nothing_reads_the_empty_tuple(tmp_path: Path) -> None:
    assert reads(evaluate(tmp_path, [P + "test_plain"])) == {"test_plain": ()}


def test_untraced_or_failed_tracing_is_none(tmp_path: Path) -> None:
    tests = [R + "test_in_process", P + "test_plain"]
    off = reads(evaluate(tmp_path / "off", tests, trace=False))
    assert off == {"test_in_process": None, "test_plain": None}
    # An artifact root that does not exist cannot be watched: the tracer fails, and
    # a failed tracer reports None rather than a partial answer.
    failed = reads(evaluate(tmp_path / "failed", tests, roots=("skills", "missing")))
    assert failed == {"test_in_process": None, "test_plain": None}


def test_replacing_the_tracer_is_tamper(tmp_path: Path) -> None:
    outcome = evaluate(tmp_path, [P + "test_plain", P + "test_cheat"])
    assert any("replaced pytest_agentdescent.readtrace.ReadTracer.end" in line
               for line in outcome.tamper), outcome.tamper


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BACKENDS)
def test_every_backend_records_in_process_and_subprocess_reads(tmp_path: Path,
                                                               name: str) -> None:
    backend = require_backend(name)
    found = reads(evaluate(tmp_path, [R + "test_in_process", R + "test_python_subprocess"],
                           backend=backend))
    assert found == {"test_in_process": ("skills/a/SKILL.md", D),
                     "test_python_subprocess": ("skills/b/SKILL.md", D)}
