"""Parallel modes: how the train tasks (and the artifact's keys) are split across workers.

* :class:`DataParallel` (default) — every worker reads the same snapshot and
  gets its own slice of the train tasks; the aggregator merges what they
  propose.
* :class:`TensorParallel` — the artifact's key space is cut into disjoint
  sections, one per worker, so proposals cannot collide.  ``route(task)``
  names the key a task's failure would edit, which gives each worker exactly
  the tasks it may act on; an edit outside its section is refused by the
  aggregator as ``section-violation``.  It needs a fixed key space
  (``KeyedRules`` categories, or a ``FileTree``'s files): ``AppendRules``
  content-addresses its keys and ``SingleSlot`` has one, so both are refused.
* :class:`PipelineParallel` — a chain of artifacts, one per stage; ``evolve()``
  evolves one artifact, so it refuses this mode with the reason.

A mode is any object with ``assign(train, n_workers, keys)`` returning one
:class:`Shard` per worker, or one with ``plan(n_workers, round_index, keys)``
returning a list of :class:`WorkUnit` (the seed's shape), which
:func:`as_mode` adapts; a planned mode is asked again at every round.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from agentdescent_core.errors import ContractError
from agentdescent_core.evaluation.callable import callable_name
from agentdescent_core.tasks import Task


@dataclass(frozen=True)
class Shard:
    """What one worker works on: its task ids, and (tensor parallel) the keys it may edit."""

    tasks: tuple[str, ...]
    allowed_keys: frozenset[str] | None = None


@dataclass(frozen=True)
class WorkUnit:
    """One worker's share of a round, as a custom ``plan()`` returns it.

    ``keys`` are the ids of the train tasks the worker rolls out (``plan`` is
    given them all as its ``keys``); ``allowed_keys``, when given, are the
    artifact keys it may edit, like a TensorParallel section (an edit outside
    them is a ``section-violation``).
    """

    worker: int
    keys: Sequence[str] = ()
    allowed_keys: Sequence[str] | None = None


@runtime_checkable
class ParallelMode(Protocol):
    name: str

    def assign(
        self, train: Sequence[Task], n_workers: int, keys: Sequence[str] | None
    ) -> list[Shard]: ...


@runtime_checkable
class PlanStrategy(Protocol):
    """A custom parallel strategy in the seed's shape: a list of WorkUnit per round."""

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]
             ) -> Sequence[WorkUnit]: ...


class DataParallel:
    """Strided task shards: worker ``i`` gets tasks ``i, i + n, i + 2n, ...``.

    With more workers than tasks, workers share tasks (worker ``i`` gets task
    ``i mod len(tasks)``) rather than idling.
    """

    name = "data"

    def __repr__(self) -> str:
        return "DataParallel()"

    def assign(
        self, train: Sequence[Task], n_workers: int, keys: Sequence[str] | None = None
    ) -> list[Shard]:
        ids = [t.id for t in train]
        if not ids:
            return [Shard(()) for _ in range(n_workers)]
        if n_workers >= len(ids):
            return [Shard((ids[i % len(ids)],)) for i in range(n_workers)]
        return [Shard(tuple(ids[i::n_workers])) for i in range(n_workers)]


class TensorParallel:
    """Disjoint sections of the artifact's keys, one per worker, tasks routed by ``route``."""

    name = "tensor"

    def __init__(self, n_sections: int, route: Callable[[Task], str] | None = None) -> None:
        if isinstance(n_sections, bool) or not isinstance(n_sections, int) or n_sections < 1:
            raise ValueError(
                f"TensorParallel n_sections must be an integer >= 1, got {n_sections!r}"
            )
        if route is not None and not callable(route):
            raise TypeError(f"TensorParallel route= must be a callable task -> key, got {route!r}")
        self.n_sections = n_sections
        self.route = route

    def __repr__(self) -> str:
        return f"TensorParallel(n_sections={self.n_sections}, route={self.route!r})"

    def sections(self, keys: Sequence[str]) -> list[tuple[str, ...]]:
        """``keys`` cut into ``n_sections`` contiguous, nearly equal, non-empty blocks."""
        count = min(self.n_sections, len(keys))
        size, extra = divmod(len(keys), count)
        blocks: list[tuple[str, ...]] = []
        start = 0
        for index in range(count):
            end = start + size + (1 if index < extra else 0)
            blocks.append(tuple(keys[start:end]))
            start = end
        return blocks

    def assign(
        self, train: Sequence[Task], n_workers: int, keys: Sequence[str] | None
    ) -> list[Shard]:
        if not keys:
            raise ContractError(
                "TensorParallel needs a strategy with a fixed key space to cut into sections "
                "(KeyedRules(categories=[...]) or a FileTree whose files exist); AppendRules "
                "content-addresses its keys and SingleSlot has a single one — use "
                "DataParallel() with those"
            )
        blocks = self.sections(keys)
        if self.route is None and len(blocks) > 1:
            warnings.warn(
                "TensorParallel without route=: every worker rolls out every task, and a "
                "proposal for a key outside its section is refused as section-violation; pass "
                "route=(task -> key) so each worker only sees the tasks it may act on",
                RuntimeWarning, stacklevel=4,
            )
        routed: dict[str, str] = {}
        if self.route is not None:
            for task in train:
                key = self.route(task)
                if key not in keys:
                    raise ContractError(
                        f"route {callable_name(self.route)} mapped task {task.id!r} to "
                        f"{key!r}, which is not a key of the artifact ({list(keys)[:8]}); "
                        "route must return the key a task's failure would edit"
                    )
                routed[task.id] = key
        shards: list[Shard] = []
        for worker in range(n_workers):
            block = frozenset(blocks[worker % len(blocks)])
            if self.route is None:
                tasks = tuple(t.id for t in train)
            else:
                tasks = tuple(t.id for t in train if routed[t.id] in block)
            shards.append(Shard(tasks, block))
        return shards


class PipelineParallel:
    """A chain of stages, each its own artifact; not an ``evolve()`` mode (see :meth:`assign`)."""

    name = "pipeline"

    def __init__(self, stages: Sequence[str] = ()) -> None:
        self.stages = tuple(stages)

    def __repr__(self) -> str:
        return f"PipelineParallel(stages={list(self.stages)!r})"

    def assign(
        self, train: Sequence[Task], n_workers: int, keys: Sequence[str] | None
    ) -> list[Shard]:
        raise ContractError(
            "PipelineParallel is not an evolve() mode: a pipeline needs one artifact per stage "
            "and evolve() evolves exactly one artifact. Evolve each stage with its own evolve() "
            "call, or use DataParallel() / TensorParallel(n_sections, route=) for one artifact"
        )


class Planned:
    """A ``plan(n_workers, round_index, keys) -> [WorkUnit]`` strategy as a ParallelMode.

    ``assign`` plans round 1; :meth:`shards_for` plans any later round, so a
    strategy can rotate its blocks from round to round.  A worker without a
    unit idles that round.  Every unit is checked: a worker id outside
    ``range(n_workers)``, a worker planned twice, or a task id that is not a
    train task raises ContractError naming the plan.
    """

    def __init__(self, planner: PlanStrategy) -> None:
        self.planner = planner
        self.name = str(getattr(planner, "name", type(planner).__name__))
        self._train: tuple[str, ...] = ()
        self._n_workers = 0

    def __repr__(self) -> str:
        return f"Planned({self.planner!r})"

    def assign(
        self, train: Sequence[Task], n_workers: int, keys: Sequence[str] | None = None
    ) -> list[Shard]:
        self._train = tuple(t.id for t in train)
        self._n_workers = n_workers
        return self.shards_for(1)

    def shards_for(self, round_index: int) -> list[Shard]:
        """The shards of round ``round_index`` (1-based), from the planner's WorkUnits."""
        where = f"{self.name}.plan({self._n_workers}, {round_index}, keys)"
        units: object = self.planner.plan(self._n_workers, round_index, list(self._train))
        if isinstance(units, (str, bytes)) or not isinstance(units, Sequence):
            raise ContractError(f"{where} returned {type(units).__name__}; it must return a "
                                "list of WorkUnit(worker=i, keys=[task ids])")
        known = set(self._train)
        shards = [Shard(()) for _ in range(self._n_workers)]
        planned: set[int] = set()
        for unit in units:
            if not isinstance(unit, WorkUnit):
                raise ContractError(f"{where} returned a {type(unit).__name__} in its list; "
                                    "each item must be a WorkUnit(worker=i, keys=[task ids])")
            if isinstance(unit.worker, bool) or not isinstance(unit.worker, int) \
                    or not 0 <= unit.worker < self._n_workers:
                raise ContractError(f"{where} planned worker {unit.worker!r}; workers are "
                                    f"0 .. {self._n_workers - 1} (n_workers={self._n_workers})")
            if unit.worker in planned:
                raise ContractError(f"{where} planned worker {unit.worker} twice; give each "
                                    "worker at most one WorkUnit")
            planned.add(unit.worker)
            tasks = tuple(str(k) for k in unit.keys)
            unknown = [k for k in tasks if k not in known]
            if unknown:
                raise ContractError(f"{where} gave worker {unit.worker} {unknown[:3]}, which "
                                    "are not train task ids; WorkUnit.keys must be taken from "
                                    "the keys plan() is given")
            allowed = None if unit.allowed_keys is None else frozenset(unit.allowed_keys)
            shards[unit.worker] = Shard(tasks, allowed)
        return shards


def as_mode(parallel: ParallelMode | PlanStrategy | object | None) -> ParallelMode:
    """``parallel=`` as a ParallelMode: DataParallel by default, a planner adapted.

    ContractError when the object has neither ``assign`` nor ``plan``.
    """
    if parallel is None:
        return DataParallel()
    if callable(getattr(parallel, "assign", None)):
        return cast(ParallelMode, parallel)
    if callable(getattr(parallel, "plan", None)):
        return Planned(cast(PlanStrategy, parallel))
    raise ContractError(
        f"parallel={parallel!r} is not a parallel mode: pass DataParallel(), "
        "TensorParallel(n_sections, route=), or an object with "
        "plan(n_workers, round_index, keys) returning [WorkUnit(worker=i, keys=[task ids])]"
    )
