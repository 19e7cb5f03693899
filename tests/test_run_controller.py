"""run_controller: every rule of the session-controller document, one test each."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from agentdescent_core.decisions import DecisionLog, FileKillSwitch
from agentdescent_core.errors import ContractError
from agentdescent_core.loop.controller import (
    ControllerConfig,
    SessionOutcome,
    run_controller,
)


def sessions(*outcomes: object, seen: list[tuple[int, int]] | None = None):
    """A run_session returning ``outcomes`` in turn (an exception instance is raised)."""
    def run_session(index: int, seed: int) -> SessionOutcome:
        if seen is not None:
            seen.append((index, seed))
        outcome = outcomes[index]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]
    return run_session


def ok(reward: float, calls: int = 1) -> SessionOutcome:
    return SessionOutcome(reward=reward, calls=calls)


def test_all_sessions_run_when_nothing_stops_them() -> None:
    seen: list[tuple[int, int]] = []
    report = run_controller(sessions(ok(0.1), ok(0.2), ok(0.3), seen=seen),
                            ControllerConfig(max_sessions=3, seed=100))
    assert seen == [(0, 100), (1, 101), (2, 102)]
    assert report.stopped_reason == "sessions"
    assert "3 session(s)" in report.reason
    assert report.best_reward == 0.3
    assert report.total_calls == 3
    assert [s.seed for s in report.sessions] == [100, 101, 102]
    assert json.loads(json.dumps(report.to_dict())) == report.to_dict()


def test_the_first_successful_session_sets_the_baseline() -> None:
    report = run_controller(sessions(ok(0.2), ok(0.1)), ControllerConfig(max_sessions=2))
    assert report.best_reward == 0.2
    assert report.sessions[0].improved  # the baseline counts as the first improvement
    assert not report.sessions[1].improved  # a lower reward never replaces it


def test_a_later_session_must_beat_the_best_to_reset_stagnation() -> None:
    # 0.5 baseline; 0.5 only ties (stagnation 1); 0.6 beats it (reset to 0);
    # 0.55 and 0.6 do not beat 0.6 (stagnation 1, 2 -> patience).
    report = run_controller(sessions(ok(0.5), ok(0.5), ok(0.6), ok(0.55), ok(0.6), ok(0.9)),
                            ControllerConfig(max_sessions=6, patience=2))
    assert [s.improved for s in report.sessions] == [True, False, True, False, False]
    assert report.stopped_reason == "patience"
    assert report.best_reward == 0.6


def test_min_gain_decides_what_counts_as_beating_the_best() -> None:
    report = run_controller(sessions(ok(0.5), ok(0.55), ok(0.7)),
                            ControllerConfig(max_sessions=3, min_gain=0.1))
    assert [s.improved for s in report.sessions] == [True, False, True]
    assert report.best_reward == 0.7


def test_patience_non_improving_sessions_stop_the_loop() -> None:
    seen: list[tuple[int, int]] = []
    report = run_controller(sessions(ok(0.5), ok(0.4), ok(0.3), ok(0.2), ok(0.9), seen=seen),
                            ControllerConfig(max_sessions=5, patience=3))
    assert len(seen) == 4
    assert report.stopped_reason == "patience"
    assert "3 session(s) in a row" in report.reason
    assert report.best_reward == 0.5


def test_best_reward_is_none_when_no_session_succeeded() -> None:
    report = run_controller(sessions(SessionOutcome(reward=None, error="backend down")),
                            ControllerConfig(max_sessions=3))
    assert report.best_reward is None
    assert report.stopped_reason == "error"


def test_an_errored_session_is_recorded_stops_and_never_updates_the_best() -> None:
    seen: list[tuple[int, int]] = []
    report = run_controller(
        sessions(ok(0.5), SessionOutcome(reward=0.99, calls=3, error="timed out"), ok(0.9),
                 seen=seen),
        ControllerConfig(max_sessions=3))
    assert len(seen) == 2
    assert report.stopped_reason == "error"
    assert "session 1 failed: timed out" in report.reason
    assert report.best_reward == 0.5  # its partial 0.99 is not the best
    failed = report.sessions[1]
    assert (failed.reward, failed.error, failed.improved, failed.calls) == (
        0.99, "timed out", False, 3)
    assert report.total_calls == 4  # calls it spent still count


def test_a_raised_session_is_an_error_record() -> None:
    report = run_controller(sessions(ok(0.5), RuntimeError("sandbox vanished"), ok(0.9)),
                            ControllerConfig(max_sessions=3))
    assert report.stopped_reason == "error"
    assert len(report.sessions) == 2
    assert report.sessions[1].error == "run_session raised RuntimeError: sandbox vanished"
    assert report.best_reward == 0.5


def test_an_empty_error_string_counts_as_an_error() -> None:
    report = run_controller(sessions(ok(0.5), SessionOutcome(reward=0.8, error=""), ok(0.9)),
                            ControllerConfig(max_sessions=3))
    assert report.stopped_reason == "error"
    assert report.sessions[1].error == ""
    assert report.best_reward == 0.5


def test_the_kill_switch_is_checked_before_every_session(tmp_path) -> None:
    stop = tmp_path / "STOP"
    switch = FileKillSwitch(stop)
    seen: list[tuple[int, int]] = []

    def run_session(index: int, seed: int) -> SessionOutcome:
        seen.append((index, seed))
        if index == 1:
            stop.write_text("weekend freeze\n")  # engaged during a session ...
        return ok(0.1 * (index + 1))

    report = run_controller(run_session, ControllerConfig(max_sessions=5, kill_switch=switch))
    assert len(seen) == 2  # ... seen at the next check, before session 2
    assert report.stopped_reason == "kill-switch"
    assert "weekend freeze" in report.reason
    assert report.best_reward == 0.2


def test_an_engaged_kill_switch_runs_no_session(tmp_path) -> None:
    (tmp_path / "STOP").write_text("")
    seen: list[tuple[int, int]] = []
    report = run_controller(sessions(ok(0.5), seen=seen),
                            ControllerConfig(max_sessions=3,
                                             kill_switch=FileKillSwitch(tmp_path / "STOP")))
    assert seen == []
    assert (report.stopped_reason, report.best_reward, report.sessions) == (
        "kill-switch", None, ())


def test_the_call_budget_is_checked_after_a_session_so_an_overshoot_stops_the_loop() -> None:
    seen: list[tuple[int, int]] = []
    report = run_controller(sessions(ok(0.1, 4), ok(0.2, 4), ok(0.3, 4), ok(0.4, 4), seen=seen),
                            ControllerConfig(max_sessions=4, max_calls=10))
    assert len(seen) == 3  # 4 + 4 + 4 = 12 overshoots 10: no fourth session
    assert report.stopped_reason == "budget"
    assert report.total_calls == 12
    assert "after session 2" in report.reason


def test_the_call_budget_is_checked_before_a_session() -> None:
    seen: list[tuple[int, int]] = []
    report = run_controller(sessions(ok(0.5), seen=seen),
                            ControllerConfig(max_sessions=3, max_calls=0))
    assert seen == []
    assert report.stopped_reason == "budget"
    assert "before session 0" in report.reason


@pytest.mark.parametrize("calls", [-1, 1.5, True, "3", None])
def test_calls_must_be_a_non_negative_integer(calls: object) -> None:
    report = run_controller(sessions(ok(0.5), SessionOutcome(reward=0.9, calls=calls)),  # type: ignore[arg-type]
                            ControllerConfig(max_sessions=3))
    assert report.stopped_reason == "error"
    assert "non-negative integer" in (report.sessions[1].error or "")
    assert report.best_reward == 0.5
    assert report.total_calls == 1


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf, "0.9"])
def test_the_reward_must_be_finite(reward: object) -> None:
    report = run_controller(sessions(SessionOutcome(reward=reward)),  # type: ignore[arg-type]
                            ControllerConfig(max_sessions=3))
    assert report.stopped_reason == "error"
    assert "finite number" in (report.sessions[0].error or "")
    assert report.best_reward is None


def test_a_success_needs_a_reward() -> None:
    report = run_controller(sessions(SessionOutcome(reward=None)),
                            ControllerConfig(max_sessions=3))
    assert report.stopped_reason == "error"
    assert "neither a reward nor an error" in (report.sessions[0].error or "")


@pytest.mark.parametrize("returned", [0.9, None, {"reward": 0.9}])
def test_anything_but_a_session_outcome_becomes_an_error_record(returned: object) -> None:
    report = run_controller(sessions(ok(0.5), returned), ControllerConfig(max_sessions=3))
    assert report.stopped_reason == "error"
    assert "expected a SessionOutcome" in (report.sessions[1].error or "")
    assert report.sessions[1].reward is None


def test_each_session_becomes_a_session_record_in_the_decision_log(tmp_path) -> None:
    def run() -> None:
        with DecisionLog(tmp_path / "decisions.sqlite3") as log:
            run_controller(
                sessions(ok(0.5, 2), ok(0.4, 3), SessionOutcome(reward=None, calls=1,
                                                                error="quota")),
                ControllerConfig(max_sessions=3, decision_log=log))

    run()
    with DecisionLog(tmp_path / "decisions.sqlite3") as log:
        records = log.records()
    assert [r.kind for r in records] == ["session"] * 3
    assert [r.category for r in records] == ["baseline", "no-gain", "error"]
    assert [r.accepted for r in records] == [True, False, False]
    assert [r.cost for r in records] == [2.0, 3.0, 1.0]
    evidence = [{k: r.evidence[k] for k in ("reward", "improved", "error", "calls")}
                for r in records]
    assert evidence == [
        {"reward": 0.5, "improved": True, "error": None, "calls": 2},
        {"reward": 0.4, "improved": False, "error": None, "calls": 3},
        {"reward": None, "improved": False, "error": "quota", "calls": 1},
    ]
    run()  # the same sessions again: deterministic ids, nothing added
    with DecisionLog(tmp_path / "decisions.sqlite3") as log:
        assert len(log.records()) == 3


def test_any_object_with_the_right_methods_is_a_switch_or_a_log() -> None:
    class Switch:
        def __init__(self) -> None:
            self.checks = 0

        def engaged(self) -> bool:
            self.checks += 1
            return self.checks > 2

        def reason(self) -> str:
            return "budget owner said stop"

    class Log:
        def __init__(self) -> None:
            self.rows: list[dict[str, Any]] = []

        def record(self, *, kind: str, artifact_id: str, accepted: bool, category: str,
                   detail: str = "", evidence: Mapping[str, Any] | None = None,
                   cost: float = 0.0) -> None:
            self.rows.append({"kind": kind, "accepted": accepted, "category": category})

    switch, log = Switch(), Log()
    report = run_controller(sessions(ok(0.1), ok(0.2), ok(0.3)),
                            ControllerConfig(max_sessions=3, kill_switch=switch,
                                             decision_log=log))
    assert report.stopped_reason == "kill-switch"
    assert report.reason.endswith("budget owner said stop")
    assert [row["kind"] for row in log.rows] == ["session", "session"]


@pytest.mark.parametrize("bad", [{"max_sessions": -1}, {"max_sessions": 2, "patience": 0},
                                 {"max_sessions": 2, "max_calls": -5},
                                 {"max_sessions": 2, "min_gain": math.nan}])
def test_an_impossible_config_is_refused_naming_the_field(bad: dict[str, Any]) -> None:
    with pytest.raises(ContractError, match="ControllerConfig"):
        ControllerConfig(**bad)
