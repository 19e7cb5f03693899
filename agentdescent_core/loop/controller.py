"""The session controller: is another self-improvement session justified?

One session (a guarded evolution, a scheduled CI job, a remote campaign step)
is the caller's business; :func:`run_controller` is the loop around sessions and
deliberately knows nothing about what one is.  Its rules:

* The first successful session sets the baseline (it counts as improved).  A
  later session improves only when its reward beats the best so far by more
  than ``min_gain``; an improvement resets the stagnation count, anything else
  adds one, and ``patience`` non-improving sessions in a row stop the loop.
  ``best_reward`` is ``None`` when no session succeeded.
* A session that raised, returned an error (``error=""`` is an error too),
  returned something other than a :class:`SessionOutcome`, a negative or
  non-integer ``calls`` or a non-finite reward is recorded as an error record,
  stops the loop and never touches the best — however high its partial reward.
* The kill switch is checked before every session (one engaged during a session
  is seen at the next check).  The call budget is checked before a session and
  after it, so a session that overshoots stops the loop before another starts.
* ``stopped_reason`` is one of the fixed codes in
  :data:`~agentdescent_core.stops.CONTROLLER_REASONS` (``sessions``, ``budget``,
  ``kill-switch``, ``error``, ``patience``); ``reason`` says the same for a human.
* With a ``decision_log`` each session becomes a ``kind="session"`` record with
  its reward, improved flag, error and calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentdescent_core.decisions import KillSwitch
from agentdescent_core.errors import ContractError
from agentdescent_core.stops import StopReason


class _RecordsDecisions(Protocol):
    def record(self, *, kind: str, artifact_id: str, accepted: bool, category: str,
               detail: str = ..., evidence: Mapping[str, Any] | None = ...,
               cost: float = ...) -> object: ...


@dataclass(frozen=True)
class SessionOutcome:
    """What one session reports: its reward (``None`` when it has none), calls spent, error."""

    reward: float | None
    calls: int = 0
    error: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ControllerConfig:
    """Limits of the session loop; ``None`` means no limit of that kind."""

    max_sessions: int
    max_calls: int | None = None
    patience: int | None = None
    seed: int = 0
    kill_switch: KillSwitch | None = None
    decision_log: _RecordsDecisions | None = None
    min_gain: float = 0.0

    def __post_init__(self) -> None:
        def whole(name: str, value: object, minimum: int, optional: bool) -> None:
            if value is None and optional:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ContractError(
                    f"ControllerConfig.{name} must be an integer >= {minimum}"
                    f"{' or None' if optional else ''}, got {value!r}")

        whole("max_sessions", self.max_sessions, 0, False)
        whole("max_calls", self.max_calls, 0, True)
        whole("patience", self.patience, 1, True)
        whole("seed", self.seed, -(2**63), False)
        if not isinstance(self.min_gain, (int, float)) or not math.isfinite(self.min_gain) \
                or self.min_gain < 0:
            raise ContractError(
                f"ControllerConfig.min_gain must be a finite number >= 0, got {self.min_gain!r}")


@dataclass(frozen=True)
class SessionRecord:
    """One session as the controller saw it (``seed`` is ``config.seed + index``)."""

    index: int
    seed: int
    reward: float | None
    calls: int
    error: str | None
    improved: bool

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "seed": self.seed, "reward": self.reward,
                "calls": self.calls, "error": self.error, "improved": self.improved}


@dataclass(frozen=True)
class ControllerReport:
    """The outcome of the loop: best reward, why it stopped, calls spent, every session."""

    best_reward: float | None
    stopped_reason: str
    reason: str
    total_calls: int
    sessions: tuple[SessionRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"best_reward": self.best_reward, "stopped_reason": self.stopped_reason,
                "reason": self.reason, "total_calls": self.total_calls,
                "sessions": [s.to_dict() for s in self.sessions]}


def _check_outcome(outcome: object) -> tuple[float | None, int, str | None]:
    """(reward, calls, error) of a session's return value; a bad one becomes an error."""
    if not isinstance(outcome, SessionOutcome):
        return None, 0, (f"run_session returned {type(outcome).__name__}, expected a "
                         "SessionOutcome")
    calls = outcome.calls
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 0:
        return _finite_or_none(outcome.reward), 0, (
            f"the session reported calls={calls!r}; calls must be a non-negative integer")
    reward = outcome.reward
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))
                               or not math.isfinite(reward)):
        return None, calls, f"the session reported reward={reward!r}; it must be a finite number"
    if outcome.error is not None:
        return (None if reward is None else float(reward)), calls, str(outcome.error)
    if reward is None:
        return None, calls, "the session reported neither a reward nor an error"
    return float(reward), calls, None


def _finite_or_none(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def run_controller(run_session: Callable[[int, int], SessionOutcome],
                   config: ControllerConfig) -> ControllerReport:
    """Run ``run_session(index, seed)`` until a rule says stop (see the module docstring)."""
    best: float | None = None
    stagnation = 0
    total_calls = 0
    sessions: list[SessionRecord] = []

    def finish(code: StopReason, reason: str) -> ControllerReport:
        return ControllerReport(best_reward=best, stopped_reason=code, reason=reason,
                                total_calls=total_calls, sessions=tuple(sessions))

    for index in range(config.max_sessions):
        switch = config.kill_switch
        if switch is not None:
            try:
                engaged, why = switch.engaged(), ""
                if engaged:
                    why = str(switch.reason())
            except Exception as exc:  # a broken switch stops rather than running unchecked
                engaged, why = True, f"the kill switch {switch!r} failed: {exc!r}"
            if engaged:
                return finish(StopReason.KILL_SWITCH,
                              f"kill switch engaged before session {index}: {why}")
        if config.max_calls is not None and total_calls >= config.max_calls:
            return finish(StopReason.BUDGET, f"call budget spent before session {index}: "
                                             f"{total_calls} of {config.max_calls} calls")
        seed = config.seed + index
        try:
            outcome: object = run_session(index, seed)
        except Exception as exc:
            reward: float | None = None
            calls = 0
            error: str | None = f"run_session raised {type(exc).__name__}: {exc}"
            evidence: Mapping[str, Any] = {}
        else:
            reward, calls, error = _check_outcome(outcome)
            evidence = outcome.evidence if isinstance(outcome, SessionOutcome) else {}
        total_calls += calls
        previous = best
        improved = False
        if error is None:
            assert reward is not None
            improved = best is None or reward > best + config.min_gain
            if improved:
                best = reward
                stagnation = 0
            else:
                stagnation += 1
        record = SessionRecord(index=index, seed=seed, reward=reward, calls=calls, error=error,
                               improved=improved)
        sessions.append(record)
        if config.decision_log is not None:
            _log(config.decision_log, record, previous, evidence)
        if error is not None:
            return finish(StopReason.ERROR,
                          f"session {index} failed: {error or '(empty error message)'}")
        if config.max_calls is not None and total_calls >= config.max_calls:
            return finish(StopReason.BUDGET, f"call budget spent after session {index}: "
                                             f"{total_calls} of {config.max_calls} calls")
        if config.patience is not None and stagnation >= config.patience:
            return finish(StopReason.PATIENCE,
                          f"{stagnation} session(s) in a row did not beat the best "
                          f"reward {best} (patience {config.patience})")
    return finish(StopReason.SESSIONS, f"all {config.max_sessions} session(s) ran")


def _log(log: _RecordsDecisions, record: SessionRecord, previous: float | None,
         evidence: Mapping[str, Any]) -> None:
    if record.error is not None:
        category, detail = "error", f"session {record.index} failed: {record.error}"
    elif previous is None:
        category, detail = "baseline", f"session {record.index} set the baseline {record.reward}"
    elif record.improved:
        category, detail = "improved", (f"session {record.index} improved the best reward "
                                        f"from {previous} to {record.reward}")
    else:
        category, detail = "no-gain", (f"session {record.index} reward {record.reward} did not "
                                       f"beat the best {previous}")
    log.record(
        kind="session", artifact_id=f"session:{record.index}:seed:{record.seed}",
        accepted=record.improved, category=category, detail=detail,
        evidence={**dict(evidence), **record.to_dict()}, cost=float(record.calls),
    )
