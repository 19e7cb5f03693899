"""What the loop kernel decides about one generation, and how that state is rebuilt.

The kernel (:mod:`.kernel`) owns order and durability; this module owns the
decision.  It is kept apart so the rules can be read in one place and so that a
replay provably goes through :meth:`LoopState.restore` — recorded decisions
only — and never through :func:`decide`, which is the only code that calls a
gate.

The rules for generation ``n`` with observation ``obs``:

1. ``obs.risk`` above ``risk_limit`` → ``rollback`` (the caller's rollback undoes
   whatever the step did) and the run stops with ``risk``.
2. Otherwise a candidate that improves on the best reward by more than
   ``min_gain`` (any reward, when there is no best yet) goes to the gates in
   order.  A gate returns ``True`` (pass), ``False`` or a string (reject, the
   string is the reason) or ``None`` (cannot tell yet: ``defer`` — not applied,
   not rejected on merit).  All pass → ``accept``.
3. A candidate that does not improve enough → ``reject``.
4. The run stops after this generation, first reason winning, when: the step
   set ``obs.stop`` (the code is ``obs.evidence["stopped_reason"]`` when it is one of
   :data:`~agentdescent_core.stops.KERNEL_REASONS`, else ``error``; a candidate not accepted is then
   recorded as ``stop``), the best reached ``target``, the total cost reached
   ``max_cost`` (``budget``), ``patience`` generations in a row were not
   accepted, or this was generation ``max_generations - 1``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdescent_core.stops import KERNEL_REASONS, StopReason

# Why a kernel run stopped (``LoopReport.stopped_reason``) is one of
# agentdescent_core.stops.KERNEL_REASONS: ``max_generations`` all generations ran;
# ``target`` the best reached the target; ``budget`` the cost budget is spent;
# ``patience`` too many generations without an accepted candidate; ``risk`` a
# candidate's risk exceeded the limit; ``cancelled`` :meth:`LoopKernel.cancel`;
# ``kill-switch`` the ``cancel`` callable of ``run()`` answered a reason; ``error`` a
# step, apply, rollback or gate failed (or returned the wrong thing); ``config`` the
# configuration is incomplete or invalid.


@dataclass(frozen=True)
class LoopObservation:
    """What one step reports: reward, cost, risk, the candidate's id and evidence.

    ``stop`` asks the run to end after this generation (the driver hit an error
    or its own budget); put the code in ``evidence["stopped_reason"]`` and a
    human reason in ``evidence["reason"]``.
    """

    reward: float
    cost: float = 0.0
    risk: float = 0.0
    artifact_id: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    stop: bool = False


@dataclass(frozen=True)
class LoopGeneration:
    """One recorded generation: the observation and the decision actually taken."""

    generation: int
    action: str
    reason: str
    reward: float | None
    gain: float | None
    cost: float
    artifact_id: str | None
    stopped: bool
    applied: bool
    span_id: str
    evidence: dict[str, Any]
    stopped_reason: str | None = None
    risk: float = 0.0
    seed: int = 0
    stop_detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation, "action": self.action, "reason": self.reason,
            "reward": self.reward, "gain": self.gain, "cost": self.cost,
            "artifact_id": self.artifact_id, "stopped": self.stopped, "applied": self.applied,
            "span_id": self.span_id, "evidence": self.evidence,
            "stopped_reason": self.stopped_reason, "risk": self.risk, "seed": self.seed,
            "stop_detail": self.stop_detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopGeneration:
        return cls(
            generation=int(data["generation"]), action=str(data["action"]),
            reason=str(data["reason"]), reward=data.get("reward"), gain=data.get("gain"),
            cost=float(data.get("cost", 0.0)), artifact_id=data.get("artifact_id"),
            stopped=bool(data.get("stopped", False)), applied=bool(data.get("applied", False)),
            span_id=str(data.get("span_id", "")), evidence=dict(data.get("evidence") or {}),
            stopped_reason=data.get("stopped_reason"), risk=float(data.get("risk", 0.0)),
            seed=int(data.get("seed", 0)), stop_detail=data.get("stop_detail"),
        )


@dataclass(frozen=True)
class LoopContext:
    """What a step (and a gate) knows: where the run is and what happened so far.

    ``seed`` is ``LoopConfig.seed + generation``; ``budget_scale`` the share of
    the cost budget left after the previous generation (1.0 without a budget).
    """

    run_id: str
    generation: int
    seed: int
    budget_scale: float
    best_reward: float | None
    history: tuple[LoopGeneration, ...]


@dataclass
class LoopState:
    """The controller's state, rebuilt from recorded generations only."""

    best_reward: float | None = None
    total_cost: float = 0.0
    stagnation: int = 0
    generations: list[LoopGeneration] = field(default_factory=list)

    @classmethod
    def restore(cls, generations: Sequence[LoopGeneration]) -> LoopState:
        state = cls()
        for generation in generations:
            state.advance(generation)
        return state

    def advance(self, generation: LoopGeneration) -> None:
        """Take a recorded generation into account (no gate, no step)."""
        self.total_cost += generation.cost
        if generation.action == "accept" and generation.reward is not None:
            self.best_reward = generation.reward
            self.stagnation = 0
        else:
            self.stagnation += 1
        self.generations.append(generation)

    def budget_scale(self, max_cost: float | None) -> float:
        if max_cost is None or max_cost <= 0:
            return 1.0
        return max(0.0, min(1.0, (max_cost - self.total_cost) / max_cost))


def span_id(run_id: str, generation: int) -> str:
    """A stable id for a generation's span, the same on every replay."""
    return hashlib.sha256(f"{run_id}:generation:{generation}".encode()).hexdigest()[:16]


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def observation_problem(observation: object, step: object) -> str | None:
    """Why ``observation`` cannot be recorded, or ``None`` when it can."""
    name = getattr(step, "__qualname__", repr(step))
    if not isinstance(observation, LoopObservation):
        return (f"the step {name} returned {type(observation).__name__}, expected a "
                "LoopObservation; return LoopObservation(reward=...) from it")
    if not _number(observation.reward):
        return f"the step {name} returned reward={observation.reward!r}; it must be finite"
    if not _number(observation.cost) or observation.cost < 0:
        return (f"the step {name} returned cost={observation.cost!r}; it must be a finite "
                "number >= 0")
    if not _number(observation.risk):
        return f"the step {name} returned risk={observation.risk!r}; it must be finite"
    evidence: object = observation.evidence
    if not isinstance(evidence, Mapping):
        return f"the step {name} returned evidence of type {type(evidence).__name__}"
    return None


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    gain: float | None
    stopped_reason: str | None
    stop_detail: str | None


def decide(state: LoopState, observation: LoopObservation, *, generation: int,
           max_generations: int, target: float | None, max_cost: float | None,
           patience: int | None, risk_limit: float | None, min_gain: float,
           run_gates: Callable[[], tuple[str, str]]) -> Decision:
    """The decision for one fresh generation; ``run_gates`` is called only for a candidate."""
    reward = float(observation.reward)
    best = state.best_reward
    gain = None if best is None else reward - best
    stop: tuple[str, str] | None = None
    if risk_limit is not None and observation.risk > risk_limit:
        action, reason = "rollback", f"risk {observation.risk} is above the limit {risk_limit}"
        stop = ("risk", reason)
    elif gain is None or gain > min_gain:
        verdict, why = run_gates()
        if verdict == "pass":
            action = "accept"
            reason = ("first candidate: sets the baseline" if gain is None
                      else f"reward {reward:.6g} improves on the best {best:.6g} by {gain:.6g}")
        else:
            action, reason = verdict, why
    else:
        action = "reject"
        reason = (f"reward {reward:.6g} does not improve on the best {best:.6g} by more than "
                  f"{min_gain:g}")
    best_after = reward if action == "accept" else best
    stagnation_after = 0 if action == "accept" else state.stagnation + 1
    total_after = state.total_cost + observation.cost
    if stop is None and observation.stop:
        code = observation.evidence.get("stopped_reason")
        code = code if code in KERNEL_REASONS else StopReason.ERROR
        stop = (str(code), str(observation.evidence.get("reason")
                                or "the step asked the run to stop"))
        if action != "accept":
            action = "stop"
    if stop is None and target is not None and best_after is not None and best_after >= target:
        stop = ("target", f"the best reward {best_after} reached the target {target}")
    if stop is None and max_cost is not None and total_after >= max_cost:
        stop = ("budget", f"the total cost {total_after:.6g} reached the budget {max_cost}")
    if stop is None and patience is not None and stagnation_after >= patience:
        stop = ("patience", f"{stagnation_after} generation(s) in a row without an accepted "
                            f"candidate (patience {patience})")
    if stop is None and generation + 1 >= max_generations:
        stop = ("max_generations", f"all {max_generations} generation(s) ran")
    return Decision(action=action, reason=reason, gain=gain,
                    stopped_reason=None if stop is None else stop[0],
                    stop_detail=None if stop is None else stop[1])
