"""Markers, the evolve_reward fixture and the plain run's "evolve: N tasks, reward R" line."""

from __future__ import annotations

import pytest

from pytest_agentdescent.markers import TaskMarker, is_guard, read_marker

# ---------------------------------------------------------------- the summary line

SUITE = """
import pytest

@pytest.mark.evolve(weight=3)
def test_heavy_pass():
    pass

@pytest.mark.evolve
def test_fails():
    assert "hello" == "goodbye"

@pytest.mark.evolve
def test_graded(evolve_reward):
    evolve_reward(0.5)

@pytest.mark.evolve
def test_graded_then_fails(evolve_reward):
    evolve_reward(0.25)
    assert False

@pytest.mark.evolve
@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.mark.evolve
@pytest.mark.xfail(reason="known", strict=False)
def test_xfailed():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

@pytest.mark.evolve
def test_setup_error(broken):
    pass

@pytest.mark.evolve_guard
def test_guard_only():
    pass

def test_unmarked():
    assert False
"""


def test_summary_line_is_the_weighted_mean_of_marked_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest()
    result.assert_outcomes(passed=3, failed=3, skipped=1, xfailed=1, errors=1)
    # weights 3, 1, 1, 1, 1 over rewards 1, 0, 0.5, 0.25, 0 (setup error); skip/xfail excluded
    expected = (3 * 1.0 + 0.0 + 0.5 + 0.25 + 0.0) / 7
    result.stdout.fnmatch_lines([f"evolve: 5 tasks, reward {expected:.3f}"])
    assert result.stdout.str().count("evolve: ") == 1


def test_parametrized_cases_are_separate_tasks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.evolve
        @pytest.mark.parametrize("n", [1, 2, 3, 4])
        def test_even(n):
            assert n % 2 == 0

        @pytest.mark.parametrize("n", [
            pytest.param(1, marks=pytest.mark.evolve(weight=2)),
            pytest.param(2),
        ])
        def test_one_case_marked(n):
            assert n == 1
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=3, failed=3)
    # 4 cases of weight 1 (two pass) + the marked case of weight 2 (passes): 4 / 6
    result.stdout.fnmatch_lines(["evolve: 5 tasks, reward 0.667"])


def test_no_line_without_a_marked_test_that_ran(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_plain():
            pass

        @pytest.mark.evolve
        def test_task():
            pass

        @pytest.mark.evolve
        @pytest.mark.skip
        def test_skipped_task():
            pass
        """
    )
    result = pytester.runpytest("-k", "plain or skipped")
    result.assert_outcomes(passed=1, skipped=1)
    assert "evolve:" not in result.stdout.str()
    collected = pytester.runpytest("--collect-only")
    assert "evolve:" not in collected.stdout.str()


def test_summary_line_under_quiet_and_with_one_task(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.evolve\ndef test_t():\n    pass\n")
    pytester.runpytest("-q").stdout.fnmatch_lines(["evolve: 1 task, reward 1.000"])


def test_summary_line_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-n", "2")
    expected = (3 * 1.0 + 0.0 + 0.5 + 0.25 + 0.0) / 7
    result.stdout.fnmatch_lines([f"evolve: 5 tasks, reward {expected:.3f}"])


# ---------------------------------------------------------------- the fixture

@pytest.mark.parametrize("value", ["1.5", "-0.1", "float('nan')", "'high'", "None"])
def test_evolve_reward_rejects_bad_values(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.evolve
        def test_graded(evolve_reward):
            evolve_reward({value})
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*is not a valid reward: a reward must be a finite real number "
                                 "in [[]0, 1[]]*"])
    result.stdout.fnmatch_lines(["evolve: 1 task, reward 0.000"])


# ---------------------------------------------------------------- marker arguments

@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("evolve", TaskMarker(1.0, None)),
        ("evolve(weight=2)", TaskMarker(2.0, None)),
        ("evolve(0.5, True)", TaskMarker(0.5, True)),
        ("evolve(holdout=False)", TaskMarker(1.0, False)),
    ],
)
def test_marker_arguments(pytester: pytest.Pytester, marker: str, expected: TaskMarker) -> None:
    item = pytester.getitem(f"import pytest\n\n@pytest.mark.{marker}\ndef test_func():\n    pass\n")
    assert read_marker(item) == expected
    assert not is_guard(item)


def test_unmarked_and_guard_items(pytester: pytest.Pytester) -> None:
    items = pytester.getitems(
        """
        import pytest

        def test_plain():
            pass

        @pytest.mark.evolve_guard
        def test_guard():
            pass
        """
    )
    assert [read_marker(item) for item in items] == [None, None]
    assert [is_guard(item) for item in items] == [False, True]


def test_class_marker_applies_to_its_methods_and_the_closest_wins(
    pytester: pytest.Pytester,
) -> None:
    items = pytester.getitems(
        """
        import pytest

        @pytest.mark.evolve(weight=2)
        class TestSkill:
            def test_inherits(self):
                pass

            @pytest.mark.evolve(weight=5, holdout=True)
            def test_own(self):
                pass
        """
    )
    assert [read_marker(item) for item in items] == [TaskMarker(2.0, None),
                                                     TaskMarker(5.0, True)]


def test_a_parametrized_case_mark_overrides_the_function_mark_argument_by_argument(
    pytester: pytest.Pytester,
) -> None:
    items = pytester.getitems(
        """
        import pytest

        @pytest.mark.evolve(weight=2)
        @pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.evolve(holdout=True))])
        def test_case(n):
            pass
        """
    )
    assert [read_marker(item) for item in items] == [TaskMarker(2.0, None),
                                                     TaskMarker(2.0, True)]


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("evolve(weight=0)", "weight must be a positive number, got 0"),
        ("evolve(weight=-1.5)", "weight must be a positive number, got -1.5"),
        ("evolve(weight='heavy')", "weight must be a positive number, got 'heavy'"),
        ("evolve(weight=True)", "weight must be a positive number, got True"),
        ("evolve(weight=float('inf'))", "weight must be a positive number, got inf"),
        ("evolve(holdout='yes')", "holdout must be True, False or None, got 'yes'"),
        ("evolve(holdout=1)", "holdout must be True, False or None, got 1"),
        ("evolve(wieght=2)", "got unknown argument(s) wieght"),
        ("evolve(1, None, 3)", "takes at most 2 positional arguments, got 3"),
        ("evolve(2, weight=3)", "got weight both by position and by name"),
    ],
)
def test_bad_marker_is_a_collection_error_naming_the_test(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        test_skill=f"import pytest\n\n@pytest.mark.{marker}\ndef test_answer():\n    pass\n"
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "test_skill.py::test_answer: @pytest.mark.evolve" in err
    assert message in err
    assert "0 passed" not in result.stdout.str()


def test_every_bad_marker_is_listed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.evolve(weight=0)
        def test_a():
            pass

        @pytest.mark.evolve
        def test_fine():
            pass

        @pytest.mark.evolve(holdout="no")
        def test_b():
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "::test_a:" in err
    assert "::test_b:" in err
    assert "::test_fine" not in err
