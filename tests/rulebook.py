"""The stub workload the driver tests share (tests/test_evolve*.py, tests/test_async_evolve.py).

12 tasks in 4 categories whose gold answers need a category rule the initial
artifact lacks; ``run`` answers right only when the rendered artifact states
the task's rule, and ``propose`` states that rule.  Tasks are ordered so the
held-out third holds one task of each category.
"""

from __future__ import annotations

import threading
from typing import Any

from agentdescent_core.tasks import Task

CATS = ("alpha", "beta", "gamma", "delta")
HELD_OUT = 1 / 3


def rule(category: str) -> str:
    return f"For {category} questions, answer in {category.upper()} form."


class Rulebook:
    """``fail_every`` makes every n-th run call raise, ``dead`` all of them; ``useless``
    proposes a new, unhelpful rule each time, like a model out of good ideas."""

    def __init__(self, *, fail_every: int = 0, dead: bool = False, useless: bool = False) -> None:
        self.fail_every = fail_every
        self.dead = dead
        self.useless = useless
        self.run_calls = 0
        self.proposed_on: list[str] = []
        self.lock = threading.Lock()
        self.tasks = [
            Task(f"{c}-{i}", f"question {i} about {c}", {"category": c, "gold": f"{c.upper()}:{i}"})
            for i in range(3) for c in CATS
        ]

    @property
    def held_out_ids(self) -> set[str]:
        return {t.id for t in self.tasks[-4:]}

    def run(self, rendered: str, task: Task) -> str:
        with self.lock:
            self.run_calls += 1
            number = self.run_calls
        if self.dead:
            raise ConnectionError("backend unreachable at http://model.invalid")
        if self.fail_every and number % self.fail_every == 0:
            raise TimeoutError(f"flaky backend (call {number})")
        category = str(task.meta["category"])
        return str(task.meta["gold"]) if rule(category) in rendered else "I do not know"

    def reward(self, task: Task, output: Any) -> float:
        return 1.0 if output == task.meta["gold"] else 0.0

    def propose(self, rendered: str, task: Task, output: Any, score: float) -> str:
        with self.lock:
            self.proposed_on.append(task.id)
            ideas = len(self.proposed_on)
        if self.useless:
            return f"Be polite (idea {ideas})."
        return rule(str(task.meta["category"]))
