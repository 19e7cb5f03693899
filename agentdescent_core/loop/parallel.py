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
:class:`Shard` per worker.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentdescent_core.errors import ContractError
from agentdescent_core.evaluation.callable import callable_name
from agentdescent_core.tasks import Task


@dataclass(frozen=True)
class Shard:
    """What one worker works on: its task ids, and (tensor parallel) the keys it may edit."""

    tasks: tuple[str, ...]
    allowed_keys: frozenset[str] | None = None


@runtime_checkable
class ParallelMode(Protocol):
    name: str

    def assign(
        self, train: Sequence[Task], n_workers: int, keys: Sequence[str] | None
    ) -> list[Shard]: ...


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
