"""Everything both drivers build before the first rollout, and tear down after the last.

:func:`build_run` validates the caller's pieces (actor signatures, strategy,
parallel mode) before anything runs, splits the tasks, opens the ledger
(scratch, fresh at ``repo_path``, or resumed from it) and wires the verifier,
the artifact store and the aggregator together.  :class:`RunParts` holds the
result; its ``close`` removes a scratch ledger and stops the evaluation pool.
:func:`wire_run` is the half that ``evolve_verified`` shares: everything
around a ledger and a verifier the caller already has.
"""

from __future__ import annotations

import dataclasses
import os
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import git

from agentdescent_core.aggregator import (
    Aggregator,
    AggregatorConfig,
    AggregatorProtocol,
    ArtifactStore,
    AuditScheduler,
)
from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.artifacts.strategies import Strategy
from agentdescent_core.codec import StateCodec, codec_for
from agentdescent_core.errors import AgentDescentError, ContractError, LedgerError
from agentdescent_core.evaluation.callable import CallableVerifier, callable_name
from agentdescent_core.evaluation.protocol import TaskSplit
from agentdescent_core.governance import check_artifact_id
from agentdescent_core.ledger.ledger import Ledger
from agentdescent_core.ledger.message import Evidence
from agentdescent_core.ledger.plumbing import RefUpdate
from agentdescent_core.loop.budget import Budget
from agentdescent_core.loop.durations import DurationEstimator, check_estimator
from agentdescent_core.loop.parallel import ParallelMode, Planned, PlanStrategy, Shard, as_mode
from agentdescent_core.loop.sampling import TaskSampler
from agentdescent_core.loop.worker import (
    Actor,
    EngineVerifier,
    WorkerContext,
    check_signatures,
)
from agentdescent_core.proposers.guardrails import Guardrails
from agentdescent_core.staleness import StalenessPolicy, get_policy
from agentdescent_core.tasks import Task

DEFAULT_ROUNDS = 15
"""Rounds of ``evolve()`` when none are given (``async_evolve()``: iterations per worker)."""


def check_int(name: str, value: object, minimum: int) -> None:
    """Refuse a knob that is not an integer of at least ``minimum`` (bools included)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


AggregatorFactory = Callable[..., Any]


def split_tasks(
    tasks: Sequence[Task], held_out_frac: float, *, shuffle: bool, seed: int
) -> TaskSplit:
    """The last ``held_out_frac`` of the tasks (after a seeded shuffle if asked) is held out."""
    if isinstance(held_out_frac, bool) or not 0.0 <= float(held_out_frac) < 1.0:
        raise ValueError(f"held_out_frac must be in [0, 1), got {held_out_frac!r}")
    order = [t.id for t in tasks]
    if shuffle:
        random.Random(seed).shuffle(order)
    n_held = 0
    if held_out_frac > 0 and len(order) >= 2:
        n_held = min(max(round(len(order) * float(held_out_frac)), 1), len(order) - 1)
    if 0 < n_held < 4:
        warnings.warn(
            f"only {n_held} held-out task(s): final_reward, target_reward and patience are "
            "measured on them and can only take a few values; use more tasks or a larger "
            "held_out_frac",
            RuntimeWarning, stacklevel=4,
        )
    cut = len(order) - n_held
    return TaskSplit(train=tuple(order[:cut]), held_out=tuple(order[cut:]))


def _init_repository(path: str, files: dict[str, str], tree: FileTree) -> Ledger:
    """A new bare repository at ``path`` whose first commit (``main``) holds ``files``."""
    os.makedirs(path, exist_ok=True)
    env = {
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
        "GIT_DIR": path,
    }
    try:
        git.Git(path).execute(["git", "init", "--bare", "--quiet", "--template=", path], env=env)
    except git.GitCommandError as exc:
        raise LedgerError(f"could not create a ledger repository at {path}: {exc}") from exc
    ledger = Ledger(path, tree)
    ops: dict[str, str | None] = {p: files[p] for p in sorted(files)}
    tree_sha = ledger.git.build_tree(None, ops, ledger.git.write_blobs(ops))
    sha = ledger.git.commit_tree(tree_sha, [], "agentdescent run base: the initial artifact\n")
    ledger.git.update_refs([RefUpdate("refs/heads/main", sha, None)], "agentdescent: run base")
    ledger.git.run("symbolic-ref", "HEAD", "refs/heads/main")
    return ledger


def open_ledger(
    repo_path: str | os.PathLike[str] | None,
    strategy: Strategy,
    codec: StateCodec,
    artifact_id: str,
    initial_state: Mapping[str, str] | None = None,
) -> tuple[Ledger, bool]:
    """The run's ledger and whether an earlier run's artifact was found (resume).

    Without ``repo_path``: a scratch repository (removed by ``close``).  With a
    missing or empty directory: a new repository there holding the initial
    artifact.  With an existing repository: its ledger branches are reused (the
    artifact continues from dev) or created from HEAD, and the initial artifact
    is committed on dev when HEAD does not already hold it.  ``initial_state``
    (already checked by :func:`check_initial_state`) replaces
    ``strategy.initial()`` as the initial artifact; on a resume it is ignored,
    with a RuntimeWarning.
    """
    initial = dict(initial_state) if initial_state is not None else strategy.initial()
    files = {p: t for p, t in codec.to_files(initial).items() if t is not None}
    if repo_path is None:
        return Ledger.scratch(files, codec.tree), False
    path = os.path.abspath(os.fspath(repo_path))
    if not os.path.exists(path) or (os.path.isdir(path) and not os.listdir(path)):
        ledger = _init_repository(path, files, codec.tree)
    else:
        ledger = Ledger(path, codec.tree)
    branches = ledger.ensure_branches("HEAD")
    if branches.resumed:
        if initial_state is not None:
            warnings.warn(
                f"initial_state= is ignored: {path} already holds this run's artifact, and "
                "the run continues from its dev branch; pass a fresh repo_path to start over",
                RuntimeWarning, stacklevel=4,
            )
        return ledger, True
    present = codec.from_files(ledger.read_state(ledger.head("dev")))
    ops: dict[str, str | None] = {k: v for k, v in initial.items() if present.get(k) != v}
    ops.update({k: None for k in present if k not in initial})
    if ops:
        ledger.commit(
            Diff(codec.to_files(ops), target=artifact_id, author="initial",
                 rationale="the initial artifact of the run"),
            evidence=Evidence(extra={"Agentdescent-Initial": "true"}),
        )
    return ledger, False


def _keys_for_sections(strategy: Strategy, state: dict[str, str]) -> list[str] | None:
    categories = getattr(strategy, "categories", None)
    if isinstance(categories, (list, tuple)) and categories:
        return [str(c) for c in categories]
    if isinstance(strategy, FileTree):
        return sorted(state) or None
    return None


@dataclass
class RunParts:
    """The wired-up pieces of one run.

    ``owns_verifier`` / ``owns_ledger``: whether ``close`` closes them — True
    for what the run built itself, False for what a caller handed in
    (``evolve_verified``), which the caller still reads after the run.
    """

    split: TaskSplit
    strategy: Strategy
    ledger: Ledger
    store: ArtifactStore
    verifier: EngineVerifier
    aggregator: AggregatorProtocol
    budget: Budget
    ctx: WorkerContext
    shards: list[Shard]
    resumed: bool
    scratch: bool
    owns_verifier: bool = True
    owns_ledger: bool = True
    planner: Planned | None = None

    def shards_for(self, round_index: int) -> list[Shard]:
        """The workers' shards in round ``round_index``: re-planned for a plan() strategy."""
        if self.planner is None or round_index <= 1:
            return self.shards
        return self.planner.shards_for(round_index)

    def close(self) -> None:
        self.ctx.stop.set()  # abandoned units stop calling the backend at their next step
        if self.owns_verifier:
            self.verifier.close()
        if self.owns_ledger:
            self.ledger.close()

    def ledger_log(self) -> list[str]:
        log = getattr(self.store, "log", None)
        try:
            return list(log()) if callable(log) else []
        except Exception:  # cosmetic: a failing log must not take the result with it
            return []


def check_strategy(strategy: Strategy) -> None:
    """ContractError unless ``strategy`` has what the workers and the store call."""
    for name in ("initial", "render", "to_diff"):
        if not callable(getattr(strategy, name, None)):
            raise ContractError(
                f"strategy {type(strategy).__name__} has no {name}() method; a strategy needs "
                "initial(), render(state) and to_diff(state, proposal, author, base_version, "
                "target) (AppendRules, KeyedRules, SingleSlot and FileTree have them)"
            )


def check_initial_state(initial_state: object, strategy: Strategy, codec: StateCodec
                        ) -> dict[str, str]:
    """``initial_state=`` as a plain dict, or a ValueError saying what is wrong with it.

    It must be a ``{key: text}`` mapping of strings, with keys the strategy
    has: a KeyedRules category, a FileTree path under its roots.
    """
    if not isinstance(initial_state, Mapping):
        raise ValueError(
            f"initial_state must be a {{key: text}} mapping (a strategy's state), got "
            f"{type(initial_state).__name__}"
        )
    bad = [k for k, v in initial_state.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise ValueError(f"initial_state must map str keys to str text; {bad[:3]!r} do not")
    state = dict(initial_state)
    categories = getattr(strategy, "categories", None)
    if isinstance(categories, (list, tuple)) and categories:
        unknown = sorted(set(state) - {str(c) for c in categories})
        if unknown:
            raise ValueError(
                f"initial_state has key(s) {unknown[:3]} that are not categories of "
                f"{type(strategy).__name__} ({list(categories)[:8]}); use those keys"
            )
    if isinstance(strategy, FileTree):
        try:
            codec.tree.validate_ops(dict(state))
        except (ValueError, AgentDescentError) as exc:
            raise ValueError(f"initial_state is not a valid FileTree state: {exc}") from None
    return state


def config_with(agg_config: AggregatorConfig | None, **knobs: object) -> AggregatorConfig | None:
    """``agg_config`` with the evolve()-level knobs that were given (not None) set on it.

    ValueError when ``agg_config`` already sets one of them to another value:
    which one the caller meant cannot be guessed.
    """
    given = {name: value for name, value in knobs.items() if value is not None}
    if not given:
        return agg_config
    if agg_config is None:
        return AggregatorConfig(**given)  # type: ignore[arg-type]
    default = AggregatorConfig()
    for name, value in given.items():
        current = getattr(agg_config, name)
        if current != getattr(default, name) and current != value:
            raise ValueError(
                f"{name}={value!r} was given to evolve() and agg_config sets {name}={current!r}; "
                "pass it in one place"
            )
    return dataclasses.replace(agg_config, **given)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ResolvedOptions:
    """What a run decides before it touches a ledger: shards, staleness policy, config."""

    shards: list[Shard]
    policy: StalenessPolicy
    config: AggregatorConfig
    planner: Planned | None = None  # a plan() strategy, asked again every round


def resolve_options(
    *,
    train: Sequence[Task],
    keys_state: Mapping[str, str],
    strategy: Strategy,
    parallel: ParallelMode | PlanStrategy | None,
    staleness_policy: StalenessPolicy | str | None,
    agg_config: AggregatorConfig | None,
    n_workers: int,
) -> ResolvedOptions:
    """Validate and resolve the run's plug-ins (raising before any side effect).

    ``keys_state`` is the artifact state whose keys a TensorParallel split
    cuts into sections.
    """
    mode = as_mode(parallel)
    shards = mode.assign(list(train), n_workers, _keys_for_sections(strategy, dict(keys_state)))
    if isinstance(staleness_policy, str):
        staleness_policy = get_policy(staleness_policy)
    policy = staleness_policy if staleness_policy is not None else get_policy()
    config = agg_config if agg_config is not None else AggregatorConfig()
    return ResolvedOptions(shards, policy, config, mode if isinstance(mode, Planned) else None)


def wire_run(
    options: ResolvedOptions,
    *,
    split: TaskSplit,
    ledger: Ledger,
    verifier: EngineVerifier,
    actor: Actor,
    strategy: Strategy,
    task_sampler: TaskSampler,
    blast_radius: float,
    aggregator_factory: AggregatorFactory | None,
    budget: Budget,
    artifact_id: str,
    seed: int,
    resumed: bool,
    scratch: bool,
    owns_verifier: bool = True,
    owns_ledger: bool = True,
    guardrails: Guardrails | None = None,
    duration_estimator: DurationEstimator | None = None,
) -> RunParts:
    """Store, aggregator and worker context around an open ledger and a verifier.

    Shared by :func:`build_run` (``evolve()`` / ``async_evolve()``) and
    ``evolve_verified`` (the pytest plugin), so both drive the same pipeline.
    ``guardrails`` (default ``Guardrails()``) checks every proposal in the
    workers; ``duration_estimator`` (default None) times their rollouts.  On
    failure, closes what it owns before raising.
    """
    try:
        codec = codec_for(strategy)
        store = ArtifactStore(ledger, strategy, codec, artifact_id=artifact_id,
                              blast_radius=blast_radius)
        config = options.config
        audit = AuditScheduler(oracle_budget=config.oracle_budget,
                               trust_floor=config.trust_floor)
        factory = aggregator_factory if aggregator_factory is not None else Aggregator
        aggregator = factory(store, verifier, audit, config, options.policy)
        missing = [m for m in ("step", "flush", "finish", "head", "head_reward")
                   if not callable(getattr(aggregator, m, None))]
        if missing:
            raise ContractError(
                f"aggregator_factory {callable_name(factory)} returned "
                f"{type(aggregator).__name__}, which lacks {', '.join(missing)}; it must "
                "satisfy AggregatorProtocol (step, flush, finish, head, head_reward)"
            )
        ctx = WorkerContext(actor=actor, strategy=strategy, verifier=verifier, budget=budget,
                            sampler=task_sampler, artifact_id=artifact_id, seed=seed,
                            guardrails=guardrails if guardrails is not None else Guardrails(),
                            durations=duration_estimator)
    except BaseException:
        if owns_verifier:
            verifier.close()
        if owns_ledger:
            ledger.close()
        raise
    return RunParts(split=split, strategy=strategy, ledger=ledger, store=store,
                    verifier=verifier, aggregator=aggregator, budget=budget, ctx=ctx,
                    shards=options.shards, resumed=resumed, scratch=scratch,
                    owns_verifier=owns_verifier, owns_ledger=owns_ledger,
                    planner=options.planner)


def build_run(
    tasks: list[Task],
    reward: Callable[[Task, Any], Any],
    actor: Actor,
    *,
    strategy: Strategy,
    parallel: ParallelMode | PlanStrategy | None,
    task_sampler: TaskSampler,
    blast_radius: float,
    agg_config: AggregatorConfig | None,
    aggregator_factory: AggregatorFactory | None,
    staleness_policy: StalenessPolicy | str | None,
    n_workers: int,
    repo_path: str | os.PathLike[str] | None,
    held_out_frac: float,
    shuffle: bool,
    seed: int,
    budget: Budget,
    eval_concurrency: int,
    artifact_id: str,
    guardrails: Guardrails | None = None,
    initial_state: Mapping[str, str] | None = None,
    duration_estimator: DurationEstimator | None = None,
) -> RunParts:
    check_signatures(actor, reward)
    check_estimator(duration_estimator)
    check_strategy(strategy)
    check_artifact_id(artifact_id)
    codec = codec_for(strategy)
    if initial_state is not None:
        initial_state = check_initial_state(initial_state, strategy, codec)
    split = split_tasks(tasks, held_out_frac, shuffle=shuffle, seed=seed)
    by_id = {t.id: t for t in tasks}
    options = resolve_options(
        train=[by_id[t] for t in split.train],
        keys_state=initial_state if initial_state is not None else strategy.initial(),
        strategy=strategy,
        parallel=parallel, staleness_policy=staleness_policy, agg_config=agg_config,
        n_workers=n_workers,
    )
    ledger, resumed = open_ledger(repo_path, strategy, codec, artifact_id, initial_state)
    try:
        verifier = CallableVerifier(
            tasks, actor.run, reward, strategy.render, split,
            eval_concurrency=eval_concurrency, on_call=budget.charge_run, seed=seed,
        )
    except BaseException:
        ledger.close()
        raise
    return wire_run(
        options, split=split, ledger=ledger, verifier=verifier, actor=actor, strategy=strategy,
        task_sampler=task_sampler, blast_radius=blast_radius,
        aggregator_factory=aggregator_factory, budget=budget, artifact_id=artifact_id,
        seed=seed, resumed=resumed, scratch=repo_path is None, guardrails=guardrails,
        duration_estimator=duration_estimator,
    )
