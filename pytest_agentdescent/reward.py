"""The ``evolve_reward`` fixture: a test's graded reward, kept on the test item.

A test that can say *how well* the agent did (not just pass / fail) calls
``evolve_reward(0.7)``.  The value is checked at once — a reward the statistics
cannot trust fails the test right there, naming the value — and stored in the
item's stash, where the child's recorder (``pytest_agentdescent.recorder``) reads
it when it writes the test's record.  Outside an evaluation the fixture still
works (and still validates), so the same suite runs under plain ``pytest``.

This module is imported by the plugin entry point in every pytest run, so it
stays light: the engine's reward rule is imported when a value is first recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

# CHILD_ENV (set to "1" in every child pytest that evaluates a candidate) is
# re-exported here for the plugin, which must not start an evolution there.

#: Where the recorded reward of the current test lives (``item.stash``).
REWARD_KEY = pytest.StashKey[float]()

_RULE = (
    "a reward must be a finite real number in [0, 1] (or a bool: True is 1.0, False 0.0); "
    "clip or rescale graded scores before recording them"
)


class RewardRecorder:
    """What the ``evolve_reward`` fixture returns: call it with the test's reward.

    The last value recorded wins.  The recorded reward is returned as a float,
    so a test can assert on it too.
    """

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def __call__(self, value: object) -> float:
        reward = _reward_rule()(value)
        if reward is None:
            pytest.fail(f"evolve_reward({value!r:.80}) is not a valid reward: {_RULE}",
                        pytrace=False)
        self._item.stash[REWARD_KEY] = reward
        return reward

    @property
    def value(self) -> float | None:
        """The reward recorded so far for this test, or None."""
        return recorded_reward(self._item)


@pytest.fixture
def evolve_reward(request: pytest.FixtureRequest) -> RewardRecorder:
    """Record a graded reward in [0, 1] for the current test: ``evolve_reward(0.8)``.

    Without it a task's reward is its outcome: 1.0 when it passes, 0.0 when it
    fails.  A value outside [0, 1], a NaN or a non-number fails the test.
    """
    item = request.node
    if not isinstance(item, pytest.Item):  # pragma: no cover - function scope gives an Item
        raise TypeError("evolve_reward is a function-scoped fixture for test items")
    return RewardRecorder(item)


def _reward_rule() -> Callable[[object], float | None]:
    """The engine's one definition of a valid reward, imported when first needed.

    ``agentdescent_core.stats`` loads its numpy/scipy parts lazily, so this
    import costs the child only the standard-library ``samples`` module.
    """
    from agentdescent_core.stats.samples import as_reward

    return as_reward


def recorded_reward(item: pytest.Item) -> float | None:
    """The reward ``item`` recorded in its current run, or None when it recorded none."""
    return item.stash.get(REWARD_KEY, None)


def clear_reward(item: pytest.Item) -> None:
    """Forget the recorded reward (before repeating the same item)."""
    if REWARD_KEY in item.stash:
        del item.stash[REWARD_KEY]
