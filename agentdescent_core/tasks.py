"""Tasks: the unit of work an actor is run on and a reward scores.

A task is what the caller's ``run`` sees and what ``reward`` judges; its
``meta`` carries anything the caller wants to keep next to the prompt (a gold
answer, a category, a difficulty) — the engine never reads it, an LLM reflector
may show it to the proposer.  Task ids must be unique within a run: the
evaluation cache, the ledger's evidence and the reports all key on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Task:
    """One task: ``id`` (unique in the run), ``prompt`` for the actor, free-form ``meta``."""

    id: str
    prompt: str
    meta: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"Task id must be non-empty text, got {self.id!r}")
        if not isinstance(self.prompt, str):
            raise TypeError(
                f"Task {self.id!r}: prompt must be a str, got {type(self.prompt).__name__}; "
                "put structured inputs in meta="
            )
        if not isinstance(self.meta, Mapping):
            raise TypeError(
                f"Task {self.id!r}: meta must be a mapping, got {type(self.meta).__name__}"
            )
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    def __hash__(self) -> int:
        return hash(self.id)


def as_tasks(tasks: Iterable[Task | str] | Sequence[Task | str]) -> list[Task]:
    """Normalise what ``evolve(tasks=...)`` accepts: Tasks, or bare prompts (id = index).

    Raises ValueError naming the first duplicate id, because two tasks with one
    id would silently share cached rewards.
    """
    out: list[Task] = []
    seen: set[str] = set()
    for index, item in enumerate(tasks):
        if isinstance(item, Task):
            task = item
        elif isinstance(item, str):
            task = Task(id=f"task-{index}", prompt=item)
        else:
            raise TypeError(
                f"tasks[{index}] is a {type(item).__name__}; pass Task(id, prompt, meta) "
                "objects or prompt strings"
            )
        if task.id in seen:
            raise ValueError(
                f"task id {task.id!r} appears twice; task ids must be unique within a run"
            )
        seen.add(task.id)
        out.append(task)
    if not out:
        raise ValueError("no tasks: evolve() needs at least one Task")
    return out
