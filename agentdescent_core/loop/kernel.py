"""The loop kernel: one durable loop of generations that survives a crash.

A generation is ``step -> decision -> apply/rollback -> record``.  ``step``
(the caller's session: propose, evaluate) returns a :class:`LoopObservation`;
the decision (:mod:`.decide`) turns it into ``accept``, ``reject``, ``defer``,
``rollback`` or ``stop``; an accepted candidate is applied with ``apply``; only
after all of that returned is the generation recorded as the event
``generation:{n}`` in the :class:`~agentdescent_core.loop.durable.SqliteRunStore`,
carrying the observation and the decision actually taken.

Guarantees, which are those of the store — at-least-once, not exactly-once:

* A crash (SIGKILL included) at any point loses at most the generation in
  flight; the next ``run()`` replays the recorded generations through
  :meth:`LoopState.restore` — recorded decisions, no gate called, no step re-run
  — and continues with the next generation.  A recorded generation is never
  run again.
* The generation in flight *is* run again, so ``step`` and ``apply`` must be
  idempotent for ``(run_id, generation)``.
* One worker at a time: ``run()`` holds the lease named ``run_id`` and renews it
  every generation; another worker gets :class:`LeaseHeld` naming the holder.
* The final generation is a generation event too (``stopped=True``), then a
  ``stop`` event, then the terminal status — each step of that is resumable.
* A missing or invalid configuration value (``max_generations=None`` included)
  and a step returning anything but a valid observation are recorded failures
  (``stopped_reason`` ``config`` / ``error``), never a silent default.
* A step (or apply) raising :class:`RetryableStepError` is retried up to
  ``max_step_failures`` times per call; after that ``run()`` returns with the
  run still ``running`` (``report.terminal`` is false): call ``run()`` again.

Stop reason codes are :data:`~agentdescent_core.stops.KERNEL_REASONS`:
``max_generations``, ``target``, ``budget``, ``patience``, ``risk``,
``cancelled``, ``kill-switch``, ``error``, ``config``.  ``error`` and ``config``
end the run as ``failed``, ``cancelled`` and ``kill-switch`` as ``cancelled``,
the rest as ``completed``.  With a decision log, each generation is a
``kind="loop"`` record with the id ``{run_id}:generation:{n}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agentdescent_core.decisions import DecisionLog
from agentdescent_core.errors import (
    AgentDescentError,
    RetryableStepError as RetryableStepError,
    RunInterrupted,
)

# A step takes a LoopContext and returns a LoopObservation: they are the kernel's
# contract, so they are named here too (defined with the decision rules).
from agentdescent_core.loop.decide import (
    LoopContext as LoopContext,
    LoopGeneration as LoopGeneration,
    LoopObservation as LoopObservation,
    LoopState,
    _number as _finite,
    decide,
    observation_problem,
    span_id,
)
from agentdescent_core.loop.durable import (
    TERMINAL_STATUSES,
    RunEvent,
    RunStoreError,
    SqliteRunStore,
)
from agentdescent_core.stops import StopReason

Gate = Callable[[LoopContext, LoopObservation], "bool | str | None"]
Step = Callable[[LoopContext], LoopObservation]
Effect = Callable[[LoopContext, LoopObservation], object]

_STATUS_OF_STOP: dict[str, str] = {StopReason.ERROR: "failed", StopReason.CONFIG: "failed",
                   StopReason.CANCELLED: "cancelled", StopReason.KILL_SWITCH: "cancelled"}


@dataclass(frozen=True)
class LoopConfig:
    """What one kernel run may do; ``None`` means no limit of that kind.

    ``max_generations`` has no default on purpose: leaving it ``None`` fails the
    run with a recorded ``config`` failure.
    """

    tenant: str
    workspace: str
    max_generations: int | None = None
    target: float | None = None
    max_cost: float | None = None
    patience: int | None = None
    risk_limit: float | None = None
    min_gain: float = 0.0
    gates: Sequence[Gate] = ()
    lease_seconds: float = 300.0
    max_step_failures: int = 3
    seed: int = 0
    decision_log: DecisionLog | None = None

    def problems(self) -> list[str]:
        """Every missing or invalid value, each naming the field and the fix."""
        found: list[str] = []

        def whole(name: str, value: object, minimum: int, optional: bool) -> None:
            if value is None and optional:
                return
            if value is None:
                found.append(f"LoopConfig.{name} is not set; give it an integer >= {minimum}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                found.append(f"LoopConfig.{name} must be an integer >= {minimum}, got {value!r}")

        def number(name: str, value: object, optional: bool, positive: bool = False) -> None:
            if value is None and optional:
                return
            if not _finite(value) or (positive and not value > 0):  # type: ignore[operator]
                found.append(f"LoopConfig.{name} must be a finite"
                             f"{' positive' if positive else ''} number, got {value!r}")

        whole("max_generations", self.max_generations, 1, False)
        whole("patience", self.patience, 1, True)
        whole("max_step_failures", self.max_step_failures, 1, False)
        whole("seed", self.seed, -(2**63), False)
        number("target", self.target, True)
        number("max_cost", self.max_cost, True, positive=True)
        number("risk_limit", self.risk_limit, True)
        number("min_gain", self.min_gain, False)
        number("lease_seconds", self.lease_seconds, False, positive=True)
        if _finite(self.min_gain) and self.min_gain < 0:
            found.append(f"LoopConfig.min_gain must be >= 0, got {self.min_gain!r}")
        gates: Sequence[object] = self.gates
        for gate in gates:
            if not callable(gate):
                found.append(f"LoopConfig.gates holds {gate!r}, which is not callable")
        return found

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored with the run (gates by name, no decision log)."""
        def plain(value: object) -> object:
            if isinstance(value, float) and not math.isfinite(value):
                return repr(value)
            return value

        return {
            "tenant": self.tenant, "workspace": self.workspace,
            "max_generations": plain(self.max_generations), "target": plain(self.target),
            "max_cost": plain(self.max_cost), "patience": plain(self.patience),
            "risk_limit": plain(self.risk_limit), "min_gain": plain(self.min_gain),
            "gates": [_name(gate) for gate in self.gates],
            "lease_seconds": plain(self.lease_seconds),
            "max_step_failures": plain(self.max_step_failures), "seed": plain(self.seed),
        }


@dataclass(frozen=True)
class LoopReport:
    """A run as the store tells it; ``reason`` is the human form of ``stopped_reason``."""

    run_id: str
    status: str
    best_reward: float | None
    stopped_reason: str | None
    generations: tuple[LoopGeneration, ...]
    total_cost: float
    failures: tuple[dict[str, Any], ...]
    reason: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "status": self.status, "terminal": self.terminal,
            "best_reward": self.best_reward, "stopped_reason": self.stopped_reason,
            "reason": self.reason, "total_cost": self.total_cost,
            "generations": [g.to_dict() for g in self.generations],
            "failures": [dict(f) for f in self.failures], "config": dict(self.config),
        }


def _name(thing: object) -> str:
    return str(getattr(thing, "__qualname__", None) or getattr(thing, "__name__", None)
               or repr(thing))


def _plain(value: object) -> Any:
    """``value`` as it will read back from the store: JSON types only, odd things as str."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _generations(events: Sequence[RunEvent]) -> list[LoopGeneration]:
    return [LoopGeneration.from_dict(e.payload) for e in events if e.kind == "generation"]


def load_report(store: SqliteRunStore, run_id: str) -> LoopReport:
    """The report of a run read from the store alone (no gate, no step)."""
    record = store.get_run(run_id)
    events = store.events(run_id)
    state = LoopState.restore(_generations(events))
    stop = next((e.payload for e in events if e.kind == "stop"), None)
    result = record.result or {}
    stopped_reason = result.get("stopped_reason") or (stop or {}).get("stopped_reason")
    reason = result.get("reason") or (stop or {}).get("reason")
    if record.status == "cancelled" and stopped_reason is None:
        stopped_reason = StopReason.CANCELLED
    return LoopReport(
        run_id=run_id, status=record.status, best_reward=state.best_reward,
        stopped_reason=stopped_reason if record.terminal or stop else None,
        generations=tuple(state.generations), total_cost=state.total_cost,
        failures=tuple(dict(e.payload) for e in events if e.kind == "failure"),
        reason=reason if record.terminal or stop else None, config=record.config,
    )


class _Stop(Exception):
    """Internal: the run ends with (code, reason)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class LoopKernel:
    """Runs generations of one durable loop (see the module docstring)."""

    def __init__(self, store: SqliteRunStore, config: LoopConfig) -> None:
        self.store = store
        self.config = config

    def submit(self, *, key: str | None = None) -> str:
        """A new run; with ``key``, the unfinished run of that key (so a restart resumes it)."""
        return self.store.create_run(self.config.to_dict(), key=key)

    def report(self, run_id: str) -> LoopReport:
        return load_report(self.store, run_id)

    def snapshot(self, run_id: str) -> dict[str, Any]:
        return self.store.snapshot(run_id)

    def cancel(self, run_id: str, reason: str = "cancelled") -> None:
        """End the run as ``cancelled``; a worker running it stops at its next generation.

        A run that already ended is left as it is.
        """
        if self.store.get_run(run_id).terminal:
            return
        self.store.append_event(run_id, "stop", "stop",
                                {"stopped_reason": StopReason.CANCELLED, "reason": reason})
        try:
            self.store.set_status(run_id, "cancelled",
                                  result={"stopped_reason": StopReason.CANCELLED, "reason": reason})
        except RunStoreError:
            if not self.store.get_run(run_id).terminal:  # ended meanwhile: nothing to do
                raise

    # ---------------------------------------------------------------- running

    def run(self, run_id: str, worker: str, step: Step, *,
            apply: Effect | None = None, rollback: Effect | None = None,
            cancel: Callable[[], str | None] | None = None,
            max_generations_this_call: int | None = None) -> LoopReport:
        """Run (or resume) ``run_id`` as ``worker`` until it stops or this call's limit.

        :class:`LeaseHeld` propagates when another worker holds the run.
        """
        lease_seconds = self.config.lease_seconds if _finite(self.config.lease_seconds) \
            and self.config.lease_seconds > 0 else 300.0
        self.store.acquire_lease(run_id, worker, lease_seconds)
        try:
            self._run(run_id, worker, lease_seconds, step, apply, rollback, cancel,
                      max_generations_this_call)
        finally:
            self.store.release_lease(run_id, worker)
        return load_report(self.store, run_id)

    def _run(self, run_id: str, worker: str, lease_seconds: float, step: Step,
             apply: Effect | None, rollback: Effect | None,
             cancel: Callable[[], str | None] | None, limit: int | None) -> None:
        record = self.store.get_run(run_id)
        if record.terminal:
            return
        if record.status == "pending":
            self.store.set_status(run_id, "running")
        events = self.store.events(run_id)
        state = LoopState.restore(_generations(events))
        self._log_replayed(run_id, state.generations)
        try:
            stop = next((e.payload for e in events if e.kind == "stop"), None)
            if stop is not None:
                raise _Stop(str(stop["stopped_reason"]), str(stop["reason"]))
            problems = self.config.problems()
            if problems:
                self._fail(run_id, "failure:config", None, "config", "; ".join(problems))
            last = state.generations[-1] if state.generations else None
            if last is not None and last.stopped:
                raise _Stop(last.stopped_reason or "error", last.stop_detail or last.reason)
            done_this_call = 0
            while True:
                self._before_generation(run_id, state, cancel)
                if limit is not None and done_this_call >= limit:
                    return
                self.store.renew_lease(run_id, worker, lease_seconds)
                generation = self._generation(run_id, worker, lease_seconds, state, step,
                                              apply, rollback)
                if generation is None:  # retryable failures used up this call's budget
                    return
                done_this_call += 1
                if generation.stopped:
                    raise _Stop(generation.stopped_reason or "error",
                                generation.stop_detail or generation.reason)
        except _Stop as stop_:
            self._finish(run_id, stop_.code, stop_.reason)

    def _before_generation(self, run_id: str, state: LoopState,
                           cancel: Callable[[], str | None] | None) -> None:
        record = self.store.get_run(run_id)
        if record.status == "cancelled":
            raise _Stop("cancelled", str((record.result or {}).get("reason") or "cancelled"))
        if cancel is not None:
            try:
                why = cancel()
            except Exception as exc:  # a broken switch stops rather than running unchecked
                why = f"the cancel check {_name(cancel)} failed: {exc!r}"
            if why is not None:
                raise _Stop(StopReason.KILL_SWITCH, str(why) or "kill switch engaged")
        config = self.config
        assert config.max_generations is not None  # checked by problems()
        if len(state.generations) >= config.max_generations:
            raise _Stop("max_generations", f"all {config.max_generations} generation(s) ran")
        if config.target is not None and state.best_reward is not None \
                and state.best_reward >= config.target:
            raise _Stop("target", f"the best reward {state.best_reward} reached the target "
                                  f"{config.target}")
        if config.max_cost is not None and state.total_cost >= config.max_cost:
            raise _Stop("budget", f"the total cost {state.total_cost:.6g} reached the budget "
                                  f"{config.max_cost}")

    def _generation(self, run_id: str, worker: str, lease_seconds: float, state: LoopState,
                    step: Step, apply: Effect | None,
                    rollback: Effect | None) -> LoopGeneration | None:
        """Run, decide, apply and record the next generation (None: retry budget spent)."""
        config = self.config
        n = len(state.generations)
        context = LoopContext(run_id=run_id, generation=n, seed=config.seed + n,
                              budget_scale=state.budget_scale(config.max_cost),
                              best_reward=state.best_reward, history=tuple(state.generations))
        failures = 0
        while True:
            try:
                observation = step(context)
                problem = observation_problem(observation, step)
                if problem is not None:
                    self._fail(run_id, f"failure:{n}:invalid", n, "error", problem)
                decision = decide(
                    state, observation, generation=n, max_generations=int(
                        config.max_generations or 0), target=config.target,
                    max_cost=config.max_cost, patience=config.patience,
                    risk_limit=config.risk_limit, min_gain=config.min_gain,
                    run_gates=partial(self._gates, context, observation),
                )
                applied = False
                if decision.action == "accept" and apply is not None:
                    apply(context, observation)
                    applied = True
                elif decision.action == "rollback" and rollback is not None:
                    rollback(context, observation)
                break
            except RetryableStepError as exc:
                failures += 1
                self._record_retry(run_id, n, exc)
                if failures >= config.max_step_failures:
                    return None
            except (_Stop, RunInterrupted):
                raise  # an interruption records no failure: the run stays resumable
            except Exception as exc:
                self._fail(run_id, f"failure:{n}:error", n, "error",
                           f"generation {n} failed: {type(exc).__name__}: {exc}")
        generation = LoopGeneration(
            generation=n, action=decision.action, reason=decision.reason,
            reward=float(observation.reward), gain=decision.gain, cost=float(observation.cost),
            artifact_id=observation.artifact_id, stopped=decision.stopped_reason is not None,
            applied=applied, span_id=span_id(run_id, n),
            evidence=dict(_plain(observation.evidence)),
            stopped_reason=decision.stopped_reason, risk=float(observation.risk),
            seed=context.seed, stop_detail=decision.stop_detail,
        )
        # Renewing just before recording: a worker that lost the run records nothing.
        self.store.renew_lease(run_id, worker, lease_seconds)
        if not self.store.append_event(run_id, f"generation:{n}", "generation",
                                       generation.to_dict()):
            # Someone recorded it first (a takeover): the recorded one is the truth.
            recorded = next(e for e in self.store.events(run_id)
                            if e.key == f"generation:{n}")
            generation = LoopGeneration.from_dict(recorded.payload)
        state.advance(generation)
        self._log(run_id, generation)
        return generation

    def _gates(self, context: LoopContext, observation: LoopObservation) -> tuple[str, str]:
        for gate in self.config.gates:
            verdict = gate(context, observation)
            if verdict is True:
                continue
            if verdict is None:
                return "defer", f"gate {_name(gate)} deferred the decision"
            if verdict is False:
                return "reject", f"gate {_name(gate)} rejected the candidate"
            if isinstance(verdict, str):
                return "reject", f"gate {_name(gate)}: {verdict}"
            raise AgentDescentError(
                f"gate {_name(gate)} returned {verdict!r}; a gate returns True (pass), False or "
                "a reason string (reject) or None (defer)")
        return "pass", ""

    # ---------------------------------------------------------------- recording

    def _record_retry(self, run_id: str, n: int, exc: BaseException) -> None:
        tried = sum(1 for e in self.store.events(run_id)
                    if e.kind == "failure" and e.key.startswith(f"failure:{n}:retry:"))
        self.store.append_event(run_id, f"failure:{n}:retry:{tried}", "failure", {
            "generation": n, "code": "retryable", "retryable": True,
            "message": f"generation {n}: {type(exc).__name__}: {exc}",
        })

    def _fail(self, run_id: str, key: str, n: int | None, code: str, message: str) -> None:
        self.store.append_event(run_id, key, "failure", {
            "generation": n, "code": code, "retryable": False, "message": message})
        raise _Stop(code, message)

    def _finish(self, run_id: str, code: str, reason: str) -> None:
        self.store.append_event(run_id, "stop", "stop", {"stopped_reason": code, "reason": reason})
        record = self.store.get_run(run_id)
        if record.terminal:
            return
        state = LoopState.restore(_generations(self.store.events(run_id)))
        try:
            self.store.set_status(run_id, _STATUS_OF_STOP.get(code, "completed"), result={
                "stopped_reason": code, "reason": reason, "best_reward": state.best_reward,
                "total_cost": state.total_cost, "generations": len(state.generations),
            })
        except RunStoreError:
            if not self.store.get_run(run_id).terminal:  # cancelled meanwhile: keep that
                raise

    def _log(self, run_id: str, generation: LoopGeneration) -> None:
        log = self.config.decision_log
        if log is None:
            return
        log.record(
            kind="loop", record_id=f"{run_id}:generation:{generation.generation}",
            artifact_id=generation.artifact_id or f"{run_id}:generation:{generation.generation}",
            accepted=generation.action == "accept", category=generation.action,
            detail=generation.reason, evidence=generation.to_dict(), cost=generation.cost,
        )

    def _log_replayed(self, run_id: str, generations: Sequence[LoopGeneration]) -> None:
        # A crash between an event and its log record leaves the record missing; the
        # record ids are deterministic, so re-recording the rest is a no-op.
        for generation in generations:
            self._log(run_id, generation)
