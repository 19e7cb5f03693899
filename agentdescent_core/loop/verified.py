"""``evolve_verified()``: the synchronous driver around a verifier and a ledger the caller built.

``evolve()`` builds everything from ``run`` + ``reward``: the task split, a
CallableVerifier, a ledger.  The pytest plugin already has all three in
another form — its tasks are marked tests, its verifier runs them in
sandboxed workspaces (so the split is the verifier's), and its ledger lives in
the user's repository with branches it ensured itself.  This entry point takes
them as they are and drives the very same pipeline (``_SyncDriver``, workers,
aggregator), so a run of ``pytest --evolve`` and a run of ``evolve()`` differ
only in how a score is obtained.

Ownership: the verifier and the ledger stay open after the run — the caller
still needs them (per-task rewards for the report, the final refs) and closes
them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentdescent_core.aggregator import AggregatorConfig
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import ContractError
from agentdescent_core.governance import check_artifact_id
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.ledger.scratch import ScratchLedger
from agentdescent_core.loop.budget import Budget
from agentdescent_core.loop.evolve import _SyncDriver
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.loop.sampling import RoundRobin
from agentdescent_core.loop.setup import (
    check_int,
    check_strategy,
    resolve_options,
    wire_run,
)
from agentdescent_core.loop.worker import Actor, EngineVerifier, ProposeFn, check_propose
from agentdescent_core.proposers.guardrails import Guardrails
from agentdescent_core.staleness import StalenessPolicy
from agentdescent_core.tasks import Task

_REQUIRED = ("split", "evaluate", "rollout", "task", "render", "usage", "close")


def _no_run(rendered: str, task: Task) -> Any:
    raise ContractError(
        f"evolve_verified runs tasks through its verifier; nothing should call run() "
        f"(task {task.id!r})"
    )


def _check_verifier(verifier: object) -> None:
    missing = [name for name in _REQUIRED if getattr(verifier, name, None) is None]
    if missing or not hasattr(verifier, "ever_succeeded"):
        missing = missing or ["ever_succeeded"]
        raise ContractError(
            f"verifier {type(verifier).__name__} lacks {', '.join(missing)}; evolve_verified "
            "needs an EngineVerifier (split, evaluate, rollout, task, render, ever_succeeded, "
            "usage, close) such as SandboxedVerifier"
        )


def evolve_verified(
    verifier: EngineVerifier,
    ledger: Ledger,
    strategy: FileTree,
    propose: ProposeFn,
    *,
    n_workers: int = 2,
    rounds: int = 10,
    agg_config: AggregatorConfig | None = None,
    target_reward: float | None = None,
    patience: int | None = None,
    max_calls: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    on_round: Callable[[RoundInfo], object] | None = None,
    artifact_id: str = "artifact",
    blast_radius: float = 0.2,
    staleness_policy: StalenessPolicy | str | None = None,
    max_concurrency: int = 1,
    max_worker_errors: int = 3,
    guardrails: Guardrails | None = None,
) -> EvolutionResult:
    """Evolve the artifact on ``ledger``'s dev branch, scored by ``verifier``.

    ``verifier.split`` is the task split (train tasks are shown to proposers,
    held-out ones decide acceptance, guards must keep passing).  ``ledger``
    must have its branches (``ensure_branches``); the run starts from the dev
    head and commits accepted versions there, promoting stable at a clean
    finish.  ``propose(rendered, task, output, score)`` — or, when
    ``propose.wants_site`` is true, ``propose(..., site=ProposalSite(round,
    worker, version))`` — returns a ``{path: text or None}`` proposal or None.
    ``max_calls`` caps proposer calls (the verifier's runs are not charged).
    ``max_concurrency`` workers run at once (1: one after the other, which keeps
    a seeded run reproducible).  ``guardrails`` (default ``Guardrails()``) checks
    every proposal.  Neither the verifier nor the ledger is closed.

    Raises ContractError for a caller bug (a propose that cannot take its
    arguments, a verifier without the needed methods) before anything runs.
    """
    driver = verified_driver(
        verifier, ledger, strategy, propose, n_workers=n_workers, rounds=rounds,
        agg_config=agg_config, target_reward=target_reward, patience=patience,
        max_calls=max_calls, max_seconds=max_seconds, seed=seed, on_round=on_round,
        artifact_id=artifact_id, blast_radius=blast_radius,
        staleness_policy=staleness_policy, max_concurrency=max_concurrency,
        max_worker_errors=max_worker_errors, guardrails=guardrails,
    )
    try:
        return driver.run(rounds)
    finally:
        driver.parts.close()


def verified_driver(
    verifier: EngineVerifier,
    ledger: Ledger,
    strategy: FileTree,
    propose: ProposeFn,
    *,
    n_workers: int = 2,
    rounds: int = 10,
    agg_config: AggregatorConfig | None = None,
    target_reward: float | None = None,
    patience: int | None = None,
    max_calls: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    on_round: Callable[[RoundInfo], object] | None = None,
    artifact_id: str = "artifact",
    blast_radius: float = 0.2,
    staleness_policy: StalenessPolicy | str | None = None,
    max_concurrency: int = 1,
    max_worker_errors: int = 3,
    guardrails: Guardrails | None = None,
) -> _SyncDriver:
    """The round driver of :func:`evolve_verified`, for a caller that owns the loop.

    The durable ``pytest --evolve`` run (:mod:`.durable_run`) calls its
    ``begin()`` once, ``advance(round, trailers=...)`` for each generation it has
    not recorded yet and ``end()`` when the kernel stops, then closes
    ``driver.parts``.  Arguments and checks are those of :func:`evolve_verified`
    (``rounds`` is only validated: the caller counts them).
    """
    check_int("rounds", rounds, 0)
    check_int("n_workers", n_workers, 1)
    check_int("max_concurrency", max_concurrency, 1)
    check_int("max_worker_errors", max_worker_errors, 1)
    if patience is not None:
        check_int("patience", patience, 1)
    _check_verifier(verifier)
    check_propose(propose)
    check_strategy(strategy)
    check_artifact_id(artifact_id)
    split = verifier.split
    if not split.all_tasks:
        raise ContractError("the verifier's split has no tasks; there is nothing to evolve on")
    train = [verifier.task(task_id) for task_id in split.train]
    head_state: Mapping[str, str] = ledger.read_state(ledger.head("dev"))
    options = resolve_options(
        train=train, keys_state=head_state, strategy=strategy, parallel=None,
        staleness_policy=staleness_policy, agg_config=agg_config, n_workers=n_workers,
    )
    budget = Budget(max_calls=max_calls, max_seconds=max_seconds)
    parts = wire_run(
        options, split=split, ledger=ledger, verifier=verifier,
        actor=Actor(_no_run, propose), strategy=strategy, task_sampler=RoundRobin(),
        blast_radius=blast_radius, aggregator_factory=None, budget=budget,
        artifact_id=artifact_id, seed=seed,
        resumed=ledger.version_of(ledger.head("dev")) > 0,
        scratch=isinstance(ledger, ScratchLedger), owns_verifier=False, owns_ledger=False,
        guardrails=guardrails,
    )
    return _SyncDriver(
        parts, n_workers=n_workers, on_round=on_round, target_reward=target_reward,
        patience=patience, max_worker_errors=max_worker_errors,
        max_concurrency=max_concurrency, round_timeout=None, refresh_interval=1,
    )
