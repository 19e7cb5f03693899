"""The recorder plugin inside real child pytest processes, and the evolve_reward fixture.

Each test writes a small test suite into tmp_path and runs
``python -m pytest -p pytest_agentdescent.recorder`` on it in a subprocess (its
own session, as the sandbox backends start it), then reads the journal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import pytest_agentdescent
from agentdescent_core.evaluation.journal import PLAN_ENV, RECORD_ENV, sign_line
from agentdescent_core.evaluation.records import TestRecord
from pytest_agentdescent.recorder import combine_reports, truncate

PACKAGE_ROOT = str(Path(pytest_agentdescent.__file__).resolve().parent.parent)


@dataclasses.dataclass
class ChildRun:
    proc: subprocess.CompletedProcess[str]
    lines: list[dict[str, Any]]

    @property
    def records(self) -> list[TestRecord]:
        return [TestRecord.from_mapping(d) for d in self.lines if "outcome" in d]

    def record(self, name: str, repeat: int = 0) -> TestRecord:
        found = [r for r in self.records if r.nodeid.endswith("::" + name) and r.repeat == repeat]
        assert len(found) == 1, (name, repeat, self.records, self.proc.stdout[-2000:])
        return found[0]


def run_child(
    tmp_path: Path,
    files: dict[str, str],
    plan: dict[str, Any] | None = None,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    args: tuple[str, ...] = (),
) -> ChildRun:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    journal = tmp_path / "journal.jsonl"
    child_env = {**os.environ, RECORD_ENV: str(journal), "PYTHONPATH": PACKAGE_ROOT}
    child_env.pop("PYTEST_ADDOPTS", None)
    if plan is not None:
        (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
        child_env[PLAN_ENV] = str(tmp_path / "plan.json")
    child_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_agentdescent.recorder", "-q",
         "-p", "no:cacheprovider", *args],
        cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=timeout,
        start_new_session=True, check=False,
    )
    lines = [json.loads(line) for line in journal.read_text("utf-8").splitlines()] \
        if journal.exists() else []
    return ChildRun(proc, lines)


OUTCOMES_SUITE = """
    import logging
    import pytest

    @pytest.fixture
    def broken_setup():
        raise RuntimeError("setup broke")

    @pytest.fixture
    def broken_teardown():
        yield
        raise RuntimeError("teardown broke")

    def test_pass():
        print("to stdout")
        logging.getLogger("agent").warning("to the log")

    def test_fail():
        answer = 1
        assert answer + 1 == 3

    def test_setup_error(broken_setup):
        pass

    def test_teardown_error(broken_teardown):
        pass

    def test_fail_then_teardown_error(broken_teardown):
        assert False, "body failed"

    @pytest.mark.skip(reason="not today")
    def test_skip():
        pass

    @pytest.mark.xfail(reason="known bug")
    def test_xfail():
        assert 0

    @pytest.mark.xfail(reason="fixed already")
    def test_xpass():
        pass
"""


def test_every_outcome_is_recorded_with_its_phase_message_and_reward(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_suite.py": OUTCOMES_SUITE})
    assert run.proc.returncode == 1, run.proc.stdout

    passed = run.record("test_pass")
    assert (passed.outcome, passed.reward, passed.phase) == ("passed", 1.0, "call")
    assert "to stdout" in passed.output
    assert "to the log" in passed.output
    assert "Captured stdout call" in passed.output

    failed = run.record("test_fail")
    assert (failed.outcome, failed.reward, failed.phase) == ("failed", 0.0, "call")
    # pytest's rewritten assertion, crash line first
    assert failed.message.startswith("assert (1 + 1) == 3")
    assert "E       assert (1 + 1) == 3" in failed.message

    setup = run.record("test_setup_error")
    assert (setup.outcome, setup.reward, setup.phase) == ("error", 0.0, "setup")
    assert "RuntimeError: setup broke" in setup.message

    teardown = run.record("test_teardown_error")
    assert (teardown.outcome, teardown.reward, teardown.phase) == ("error", 0.0, "teardown")
    assert "teardown broke" in teardown.message

    both = run.record("test_fail_then_teardown_error")
    assert (both.outcome, both.phase) == ("failed", "call")
    assert "body failed" in both.message
    assert "teardown broke" in both.message

    skipped = run.record("test_skip")
    assert (skipped.outcome, skipped.reward) == ("skipped", None)
    assert "not today" in skipped.message

    xfailed = run.record("test_xfail")
    assert (xfailed.outcome, xfailed.reward, xfailed.message) == ("xfailed", None,
                                                                  "xfail: known bug")
    xpassed = run.record("test_xpass")
    assert (xpassed.outcome, xpassed.reward) == ("xpassed", 1.0)

    # One record per test, each preceded by its start marker; lines are exactly TestRecords.
    fields = {f.name for f in dataclasses.fields(TestRecord)}
    assert all(set(d) == fields for d in run.lines if "outcome" in d)
    assert len(run.records) == 8
    starts = [d for d in run.lines if "start" in d]
    assert [d["start"] for d in starts] == [r.nodeid for r in run.records]


def test_graded_rewards_are_the_recorded_values(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_graded.py": """
        def test_graded(evolve_reward):
            assert evolve_reward(0.25) == 0.25

        def test_last_value_wins(evolve_reward):
            evolve_reward(0.9)
            evolve_reward(0.4)

        def test_bool_is_pass_fail(evolve_reward):
            evolve_reward(True)

        def test_int_zero(evolve_reward):
            evolve_reward(0)

        def test_graded_then_failed(evolve_reward):
            evolve_reward(0.6)
            assert False, "the answer was only partly right"
    """})
    rewards = {r.nodeid.split("::")[1]: (r.outcome, r.reward) for r in run.records}
    assert rewards == {
        "test_graded": ("passed", 0.25),
        "test_last_value_wins": ("passed", 0.4),
        "test_bool_is_pass_fail": ("passed", 1.0),
        "test_int_zero": ("passed", 0.0),
        "test_graded_then_failed": ("failed", 0.6),
    }


BAD_REWARDS = ["float('nan')", "1.5", "-0.1", "'0.5'", "None", "float('inf')"]


def test_a_bad_reward_fails_the_test_naming_value_and_rule(tmp_path: Path) -> None:
    tests = "\n".join(f"def test_bad_{i}(evolve_reward):\n    evolve_reward({bad})\n"
                      for i, bad in enumerate(BAD_REWARDS))
    run = run_child(tmp_path, {"test_bad.py": tests})
    for i, bad in enumerate(BAD_REWARDS):
        record = run.record(f"test_bad_{i}")
        assert (record.outcome, record.reward) == ("failed", 0.0)
        assert f"evolve_reward({eval(bad)!r})" in record.message
        assert "finite real number in [0, 1]" in record.message


def test_the_fixture_validates_in_a_plain_run_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_ok(evolve_reward):
            evolve_reward(0.5)
            assert evolve_reward.value == 0.5

        def test_bad(evolve_reward):
            evolve_reward(2)
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*evolve_reward(2) is not a valid reward*"])


def test_repeats_reuse_wider_fixtures_and_rebuild_function_ones(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_rep.py": """
        import itertools
        import pytest

        module_builds = itertools.count()
        function_builds = itertools.count()

        @pytest.fixture(scope="module")
        def per_module():
            return next(module_builds)

        @pytest.fixture
        def per_function():
            value = next(function_builds)
            yield value

        def test_counts(per_module, per_function, evolve_reward):
            print(f"module={per_module} function={per_function}")
            evolve_reward(0.5 if per_function % 2 else 1.0)

        def test_other(per_module):
            print(f"other module={per_module}")
    """}, plan={"tests": {"test_rep.py::test_counts": [3, 3], "test_rep.py::test_other": [0, 1]},
                "test_timeout": None, "output_chars": 4000})
    counts = [run.record("test_counts", r) for r in (3, 4, 5)]
    assert [r.reward for r in counts] == [1.0, 0.5, 1.0]  # reward cleared between repeats
    outputs = [r.output for r in counts]
    for i, output in enumerate(outputs):
        # the module fixture is built once; the function one per repeat; output not accumulated
        assert f"module=0 function={i}" in output
        assert output.count("module=") == 1
    assert "other module=0" in run.record("test_other").output


def test_only_planned_tests_run_and_missing_ones_are_errors(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_sel.py": """
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_param(n):
            pass

        def test_not_planned():
            raise AssertionError("must not run")
    """}, plan={"tests": {"test_sel.py::test_param[2]": [0, 1],
                          "test_sel.py::test_param[3]": [0, 2]},
                "test_timeout": 30, "output_chars": 100})
    by_key = {(r.nodeid, r.repeat): r for r in run.records}
    assert set(by_key) == {("test_sel.py::test_param[2]", 0), ("test_sel.py::test_param[3]", 0),
                           ("test_sel.py::test_param[3]", 1)}
    assert by_key[("test_sel.py::test_param[2]", 0)].outcome == "passed"
    gone = by_key[("test_sel.py::test_param[3]", 1)]
    assert (gone.outcome, gone.phase, gone.reward) == ("error", "collect", 0.0)
    assert "not collected" in gone.message


def test_a_collection_error_is_reported_for_the_whole_run(tmp_path: Path) -> None:
    run = run_child(tmp_path, {
        "test_ok.py": "def test_ok():\n    pass\n",
        "test_broken.py": "def test_broken(:\n    pass\n",
    })
    errors = [d["collect_error"] for d in run.lines if "collect_error" in d]
    assert len(errors) == 1
    assert "test_broken.py" in errors[0]
    assert "SyntaxError" in errors[0]
    assert run.records == []  # pytest stops before running anything


def test_per_test_timeout_writes_the_record_and_kills_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    started = time.monotonic()
    run = run_child(tmp_path, {"test_slow.py": f"""
        import subprocess
        import sys
        import time

        def test_first():
            pass

        def test_hangs():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
            time.sleep(120)

        def test_after():
            pass
    """}, plan={"tests": {"test_slow.py::test_first": [0, 1], "test_slow.py::test_hangs": [0, 2],
                          "test_slow.py::test_after": [0, 1]},
                "test_timeout": 1.5, "output_chars": 1000})
    assert time.monotonic() - started < 30
    assert run.proc.returncode != 0
    assert run.record("test_first").outcome == "passed"
    hung = run.record("test_hangs", 0)
    assert (hung.outcome, hung.phase, hung.reward) == ("failed", "timeout", 0.0)
    assert "timed out after 1.5s" in hung.message
    assert 1.5 <= hung.duration < 10
    # the rest did not run: the parent restarts a child for them
    assert {(r.nodeid, r.repeat) for r in run.records} == {
        ("test_slow.py::test_first", 0), ("test_slow.py::test_hangs", 0)}
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild), "the test's own subprocess survived the timeout"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_captured_output_is_truncated_keeping_start_and_end(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_loud.py": """
        def test_loud():
            print("BEGIN" + "x" * 20000 + "END")
            assert False, "y" * 20000 + "LAST"
    """}, plan={"tests": {"test_loud.py::test_loud": [0, 1]}, "test_timeout": 30,
                "output_chars": 600})
    record = run.record("test_loud")
    assert len(record.output) < 700
    assert len(record.message) < 700
    assert "BEGIN" in record.output
    assert "END" in record.output
    assert "characters cut" in record.output
    assert "LAST" in record.message


def test_the_users_conftest_and_plugins_still_apply(tmp_path: Path) -> None:
    run = run_child(tmp_path, {
        "conftest.py": """
            import pytest

            def pytest_configure(config):
                config.addinivalue_line("markers", "needs_model: calls a model")

            def pytest_collection_modifyitems(items):
                for item in items:
                    if "needs_model" in item.keywords:
                        item.add_marker(pytest.mark.skip(reason="no model configured"))

            @pytest.fixture
            def agent_answer():
                return "hello"
        """,
        "test_user.py": """
            import pytest

            def test_uses_conftest_fixture(agent_answer):
                assert agent_answer == "hello"

            @pytest.mark.needs_model
            def test_skipped_by_user_hook():
                raise AssertionError("the user's hook should have skipped this")
        """,
    }, args=("--strict-markers",))
    assert run.record("test_uses_conftest_fixture").outcome == "passed"
    skipped = run.record("test_skipped_by_user_hook")
    assert (skipped.outcome, skipped.message) == ("skipped", "no model configured")


def test_fixture_exists_when_plugin_autoload_is_disabled(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_auto.py": """
        def test_graded(evolve_reward):
            evolve_reward(0.75)
    """}, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert run.record("test_graded").reward == 0.75


def test_without_a_journal_the_recorder_does_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in (RECORD_ENV, PLAN_ENV)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_agentdescent.recorder", "-q",
         "-p", "no:cacheprovider"],
        cwd=tmp_path, env={**env, "PYTHONPATH": PACKAGE_ROOT}, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert not list(tmp_path.glob("*.jsonl"))


def test_with_a_key_lines_are_signed_and_the_plan_is_hidden(tmp_path: Path) -> None:
    run = run_child(tmp_path, {"test_env.py": """
        import os

        def test_env():
            assert "AGENTDESCENT_RECORD" not in os.environ
            assert "AGENTDESCENT_PLAN" not in os.environ
    """}, plan={"tests": {"test_env.py::test_env": [0, 1]}, "test_timeout": 30,
                "output_chars": 100, "key": "k" * 64})
    assert run.record("test_env").outcome == "passed"
    assert not (tmp_path / "plan.json").exists()
    for line in run.lines:
        body = {k: v for k, v in line.items() if k != "mac"}
        assert sign_line(body, b"k" * 64) == json.dumps(line, sort_keys=True)


def test_truncate_keeps_both_ends() -> None:
    assert truncate("short", 100) == "short"
    text = "A" * 50 + "B" * 1000 + "C" * 50
    cut = truncate(text, 200)
    assert cut.startswith("A" * 50)
    assert cut.endswith("C" * 50)
    assert "[... 900 characters cut ...]" in cut


def test_combine_reports_without_a_call_phase_is_a_skip() -> None:
    report = pytest.TestReport("t.py::test_x", ("t.py", 0, "test_x"), {}, "passed", None,
                               "setup", [], duration=0.5)
    line = combine_reports("t.py::test_x", 2, [report])
    record = TestRecord.from_mapping(line)
    assert (record.outcome, record.reward, record.repeat, record.duration) == (
        "skipped", None, 2, 0.5)
