"""A worker's unit of work: roll out tasks, propose on a failure, hand over an evidence card.

Both drivers use :func:`work_unit`: the synchronous one once per worker per
round, the asynchronous one in a loop.  A unit walks its shard in sampler
order until a task fails (reward below 1.0), asks ``propose`` about that
failure, turns the proposal into a Diff through the strategy and returns an
:class:`~agentdescent_core.evidence.EvidenceCard`.  Rollouts go through the
verifier (memoised, retried); ``propose`` is retried here the same way.

A ``propose`` function whose ``wants_site`` attribute is true is also told
where it is being called from — ``site=ProposalSite(round, worker, version)``
as a keyword argument — which is what a proposer needs to seed its own
randomness per call or to show "round 3, worker-1" to a person; without the
attribute the classic four-argument call is kept, so existing callables work
unchanged.  A ``propose`` whose ``retries_itself`` attribute is true (a model
client that already retried with backoff, honouring ``retry-after``) is called
once per attempt: retrying it here would multiply its own retries.

Failure handling follows the three categories: a ContractError (the caller's
code is wrong) and the budget's stop propagate — ``propose`` may raise
BudgetExhausted itself (a proposer with its own spend cap); a proposal the
strategy refuses becomes a MergeReport with the refusal's category (counted in
the round's reasons, like any other merge decision), and so does a
RefusalError raised by ``propose`` (a model answer that is not a valid edit,
or one carrying a secret), which also ends the unit — never retried, since
asking again is a new proposal, not a retry; a backend failure after the retries is returned as the
unit's ``error`` so the driver's tolerance rule decides what it means.

Guardrails: every Diff the strategy made is checked by the run's
:class:`~agentdescent_core.proposers.guardrails.Guardrails` (``ctx.guardrails``)
before it becomes evidence — this is the one place every proposal passes,
whoever made it (a conftest hook, the model proposer, ``evolve()``'s
``propose``).  A refusal (a secret, a destructive command, a script under
``scripts=reject``) is a MergeReport of its category and ends the unit like a
proposer's refusal; warnings go out as RuntimeWarnings, once per file and
finding; the ``violation_limit``-th critical violation raises
GuardrailsTripped, a ContractError that ends the run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import random
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import state_hash
from agentdescent_core.artifacts.strategies import Strategy
from agentdescent_core.errors import BackendError, ContractError, RefusalError
from agentdescent_core.evaluation.callable import (
    Rollout,
    call_with_retries,
    callable_name,
)
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.evidence import EvidenceCard, MergeReport
from agentdescent_core.loop.budget import Budget, BudgetExhausted
from agentdescent_core.loop.durations import DurationEstimator, Straggler
from agentdescent_core.loop.parallel import Shard
from agentdescent_core.loop.sampling import TaskSampler
from agentdescent_core.proposers.guardrails import Guardrails
from agentdescent_core.stats.samples import TaskSamples
from agentdescent_core.tasks import Task

RunFn = Callable[[str, Task], Any]
ProposeFn = Callable[..., Any]


@dataclass(frozen=True)
class ProposalSite:
    """Where a proposal is asked for: the round, the worker's name, the version it reads."""

    round: int
    worker: str
    version: int


def wants_site(propose: object) -> bool:
    """True when ``propose`` asked (``propose.wants_site = True``) for the ``site=`` keyword."""
    return bool(getattr(propose, "wants_site", False))


@runtime_checkable
class EngineVerifier(Protocol):
    """What the workers and the drivers need from a verifier, beyond the aggregator's Verifier.

    CallableVerifier (``evolve()``) and SandboxedVerifier (the pytest plugin)
    both satisfy it: memoised single rollouts for the workers, the task and the
    rendered artifact for ``propose``, and the facts the failure-tolerance rule
    and the usage report read.
    """

    @property
    def split(self) -> TaskSplit: ...

    @property
    def evaluations(self) -> int: ...

    @property
    def ever_succeeded(self) -> bool: ...

    def evaluate(
        self, state: Mapping[str, str], task_ids: Sequence[str], repeats: int
    ) -> TaskSamples: ...

    def rollout(self, state: Mapping[str, str], task_id: str, repeat: int = 0) -> Rollout: ...

    def task(self, task_id: str) -> Task: ...

    def render(self, state: Mapping[str, str]) -> str: ...

    def usage(self) -> Mapping[str, int]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Actor:
    """The caller callables: ``run(rendered, task)``, ``propose(rendered, task, out, score)``."""

    run: RunFn
    propose: ProposeFn


def resolve_actor(agent: object | None, run: RunFn | None, propose: ProposeFn | None) -> Actor:
    """``agent=`` (anything with run/propose methods) or ``run=`` + ``propose=``, not both."""
    if agent is not None:
        if run is not None or propose is not None:
            raise ContractError(
                "pass either agent= or run= + propose=, not both: agent= already supplies "
                "run and propose"
            )
        agent_run = getattr(agent, "run", None)
        agent_propose = getattr(agent, "propose", None)
        if not callable(agent_run) or not callable(agent_propose):
            raise ContractError(
                f"agent {type(agent).__name__} needs callable run(rendered, task) and "
                "propose(rendered, task, output, score) methods (LLMAgent has both)"
            )
        return Actor(agent_run, agent_propose)
    if run is None or propose is None:
        missing = " and ".join(n for n, f in (("run=", run), ("propose=", propose)) if f is None)
        raise ContractError(
            f"evolve() needs an actor: pass agent=LLMAgent(...) or both run= and propose= "
            f"({missing} missing)"
        )
    for role, fn in (("run", run), ("propose", propose)):
        if not callable(fn):
            raise ContractError(f"{role}= must be callable, got {type(fn).__name__} ({fn!r:.60})")
    return Actor(run, propose)


def _check_binds(role: str, fn: object, shape: str, args: Sequence[object],
                 kwargs: Mapping[str, object] | None = None) -> None:
    try:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return  # no introspectable signature (a builtin): the first call will tell
    try:
        signature.bind(*args, **(kwargs or {}))
    except TypeError as exc:
        raise ContractError(
            f"{role} {callable_name(fn)}{signature} cannot be called as {shape} ({exc}); "
            f"give it exactly those parameters"
        ) from None


_PROBE = Task("signature-check", "")


def check_propose(propose: object) -> None:
    """Bind-test ``propose`` in the form it will be called (with ``site=`` if it wants it)."""
    if not callable(propose):
        raise ContractError(f"propose= must be callable, got {type(propose).__name__} "
                            f"({propose!r:.60})")
    if wants_site(propose):
        _check_binds("propose", propose, "propose(rendered, task, output, score, *, site) "
                     "(it sets wants_site = True)", ("", _PROBE, None, 0.0),
                     {"site": ProposalSite(0, "worker-0", 0)})
    else:
        _check_binds("propose", propose, "propose(rendered, task, output, score)",
                     ("", _PROBE, None, 0.0))


def check_signatures(actor: Actor, reward: object) -> None:
    """Bind-test the callables before the first rollout, so a typo fails fast and by name."""
    if not callable(reward):
        raise ContractError(f"reward must be callable as reward(task, output), got {reward!r:.60}")
    _check_binds("run", actor.run, "run(rendered, task)", ("", _PROBE))
    check_propose(actor.propose)
    _check_binds("reward", reward, "reward(task, output)", (_PROBE, None))


@dataclass(frozen=True)
class Snapshot:
    """The version a worker reads: proposals are made against it and carry its number."""

    version: int
    state: Mapping[str, str]


@dataclass
class UnitResult:
    """What one unit of work produced."""

    card: EvidenceCard | None = None
    reports: list[MergeReport] = field(default_factory=list)
    rollouts: int = 0
    proposals: int = 0
    succeeded: bool = False
    error: BaseException | None = None
    self_verify_rejected: bool = False
    stragglers: list[Straggler] = field(default_factory=list)


class WorkerContext:
    """Everything the workers of one run share (thread-safe where it has to be).

    ``guardrails`` checks every Diff before it becomes evidence.  ``durations``
    (a DurationEstimator, or None) learns from every rollout that really ran
    and judges it against its prediction (stragglers).
    """

    def __init__(
        self,
        *,
        actor: Actor,
        strategy: Strategy,
        verifier: EngineVerifier,
        budget: Budget,
        sampler: TaskSampler,
        artifact_id: str,
        guardrails: Guardrails,
        seed: int = 0,
        retries: int = 3,
        backoff: float = 0.01,
        durations: DurationEstimator | None = None,
    ) -> None:
        self.actor = actor
        self.durations = durations
        self.guardrails = guardrails
        self.strategy = strategy
        self.verifier = verifier
        self.budget = budget
        self.sampler = sampler
        self.artifact_id = artifact_id
        self.seed = seed
        self.retries = retries
        self.backoff = backoff
        self.stop = threading.Event()  # set when the run ends: units return at the next step
        self._lock = threading.Lock()
        self._visits: dict[tuple[str, str], int] = {}
        self._rngs: dict[int, random.Random] = {}

    def pick(self, worker: int, shard: Sequence[str], exclude: set[str]) -> str | None:
        with self._lock:
            rng = self._rngs.setdefault(worker, random.Random(self.seed * 7919 + worker))
            return self.sampler.next_task(worker, shard, rng, exclude)

    def observe(self, task_id: str, reward: float) -> None:
        with self._lock:
            self.sampler.observe(task_id, reward)

    def next_repeat(self, state_key: str, task_id: str) -> int:
        """Each visit of a (state, task) by a worker reads a fresh repeat index.

        The first visit reuses repeat 0 of the evaluations; later ones observe
        new outcomes, which matters for a stochastic actor.
        """
        with self._lock:
            index = self._visits.get((state_key, task_id), 0)
            self._visits[(state_key, task_id)] = index + 1
            return index


def _timed_rollout(ctx: WorkerContext, result: UnitResult, state: Mapping[str, str],
                   task_id: str, repeat: int, round_index: int, name: str) -> Rollout:
    """``ctx.verifier.rollout`` with its duration observed and judged (when an estimator is set)."""
    estimator = ctx.durations
    predicted = estimator.predict(task_id) if estimator is not None else None
    rollout = ctx.verifier.rollout(state, task_id, repeat)
    result.rollouts += 1
    seconds = getattr(rollout, "seconds", None)  # None: answered from the memo, or untimed
    if estimator is not None and seconds is not None:
        if predicted is not None and estimator.overran(predicted, seconds):
            result.stragglers.append(Straggler(task_id, round_index, name, round(predicted, 6),
                                               round(seconds, 6)))
        estimator.observe(task_id, seconds)
    return rollout


def _check_proposal(proposal: object, propose: object, task_id: str) -> None:
    if isinstance(proposal, (str, Mapping)) or (
        isinstance(proposal, Sequence) and not isinstance(proposal, (bytes, bytearray))
    ):
        return
    raise ContractError(
        f"propose {callable_name(propose)} returned {type(proposal).__name__} "
        f"({proposal!r:.60}) for task {task_id!r}; return the strategy's proposal (a rule "
        "string, a {key: text} mapping, a list of rules) or None for no proposal"
    )


def _rationale(proposal: object) -> str:
    carried = getattr(proposal, "rationale", None)  # a proposal object that carries its why
    if isinstance(carried, str) and carried.strip():
        return carried.strip()[:2000]
    if isinstance(proposal, str):
        return proposal.strip()[:500]
    if isinstance(proposal, Mapping):
        text = proposal.get("rationale") if "rationale" in proposal else None
        return str(text)[:500] if text else ""
    return ""


@dataclass(frozen=True)
class _Answer:
    value: Any


@dataclass(frozen=True)
class _Raised:
    exc: RefusalError | BudgetExhausted


def _shielded(call: Callable[[], Any]) -> _Answer | _Raised:
    """``call()`` with a refusal or a budget stop carried out of the retry loop as a value."""
    try:
        return _Answer(call())
    except (RefusalError, BudgetExhausted) as exc:
        return _Raised(exc)


def _refused(ctx: WorkerContext, name: str, task_id: str, refusal: RefusalError,
             by: str) -> MergeReport:
    where = {"proposer": "by the proposer", "guardrails": "by the guardrails"}.get(
        by, "before merging")
    return MergeReport(
        ctx.artifact_id, refusal.category,
        f"{name}'s proposal for task {task_id!r} was refused {where} "
        f"({refusal.code}): {refusal.message}",
        considered=1,
        extra={"code": refusal.code, "refused_by": by, "worker": name, "task": task_id},
    )


def _guard(ctx: WorkerContext, diff: Diff, state: Mapping[str, str]) -> RefusalError | None:
    """The guardrails' refusal of ``diff`` (None when it may go on); warnings are emitted.

    ``state`` is what the proposal was made against: what it already held is
    not the proposal's doing.  GuardrailsTripped propagates (the run ends).
    """
    try:
        findings = ctx.guardrails.check(diff.ops, base=state)
    except RefusalError as refusal:
        return refusal
    for line in ctx.guardrails.warnings_for(findings):
        warnings.warn(line, RuntimeWarning, stacklevel=3)
    return None


def work_unit(
    ctx: WorkerContext,
    worker: int,
    snapshot: Snapshot,
    shard: Shard,
    round_index: int,
    *,
    self_verify: bool = False,
    first: str | None = None,
) -> UnitResult:
    """Roll out until a failure, propose once on it, return the card (or why there is none).

    ``first`` is the task to roll out first when the driver already picked it
    (longest-first dispatch picks before it orders the units); later tasks
    come from the sampler as usual.
    """
    result = UnitResult()
    name = f"worker-{worker}"
    state = dict(snapshot.state)
    key = state_hash(state)
    tried: set[str] = set()
    try:
        while len(tried) < len(shard.tasks) and not ctx.stop.is_set():
            task_id = first if first is not None and not tried else \
                ctx.pick(worker, shard.tasks, tried)
            if task_id is None:
                break
            tried.add(task_id)
            rollout = _timed_rollout(ctx, result, state, task_id, ctx.next_repeat(key, task_id),
                                     round_index, name)
            result.succeeded = True
            ctx.observe(task_id, rollout.reward)
            if rollout.reward >= 1.0 or ctx.stop.is_set():
                continue
            task = ctx.verifier.task(task_id)
            rendered = ctx.verifier.render(state)
            call = functools.partial(ctx.actor.propose, rendered, task, rollout.output,
                                     rollout.reward)
            if wants_site(ctx.actor.propose):
                call = functools.partial(call, site=ProposalSite(round_index, name,
                                                                 snapshot.version))
            retries = 0 if getattr(ctx.actor.propose, "retries_itself", False) else ctx.retries
            answer = call_with_retries(
                functools.partial(_shielded, call),
                what=f"propose {callable_name(ctx.actor.propose)} on task {task_id!r}",
                retries=retries, backoff=ctx.backoff, on_attempt=ctx.budget.charge_propose,
            )
            result.proposals += 1
            if isinstance(answer, _Raised):
                if isinstance(answer.exc, RefusalError):
                    # the refused answer was this unit's proposal: one call per unit, so a
                    # model that keeps answering badly cannot burn a call per failing task
                    result.reports.append(_refused(ctx, name, task_id, answer.exc, "proposer"))
                    return result
                raise answer.exc
            proposal = answer.value
            if proposal is None:
                continue
            _check_proposal(proposal, ctx.actor.propose, task_id)
            try:
                diff = ctx.strategy.to_diff(state, proposal, name, snapshot.version,
                                            ctx.artifact_id)
            except RefusalError as refusal:
                result.reports.append(_refused(ctx, name, task_id, refusal, "strategy"))
                continue
            if diff is None:
                continue  # the artifact already says this
            guarded = _guard(ctx, diff, state)
            if guarded is not None:
                # like a refused answer: one call per unit, so a proposer that keeps
                # echoing a secret cannot burn a call per failing task
                result.reports.append(_refused(ctx, name, task_id, guarded, "guardrails"))
                return result
            if not diff.rationale:
                diff = dataclasses.replace(diff, rationale=_rationale(proposal))
            before, after = rollout.reward, None
            if self_verify:
                after = _timed_rollout(ctx, result, diff.apply(state), task_id, 0,
                                       round_index, name).reward
                if after < before:
                    result.self_verify_rejected = True
                    continue
            result.card = EvidenceCard(
                diff=diff, worker=name, round=round_index, tasks=(task_id,),
                before=before, after=after, allowed_keys=shard.allowed_keys,
            )
            return result
    except BackendError as exc:
        result.error = exc
    return result
