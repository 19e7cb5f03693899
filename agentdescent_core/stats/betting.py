"""A paired test by betting: anytime-valid evidence bought one pair of runs at a time.

The question is the permutation test's — *would these results be surprising
if the edit did nothing?* — asked so that runs can be bought where they are
informative and the test can stop whenever it likes.

A **pair** is one run of the base and one run of the candidate on the same
task, rewards ``b, c`` in [0, 1]; ``d = c - b`` lies in [-1, 1].  A gambler
starts with wealth 1 and, before each pair, stakes a fraction ``lam`` in
[0, 1) of it on "the candidate wins": wealth is multiplied by ``1 + lam * d``.
``lam`` is chosen from earlier pairs only (it is *predictable*).

Why this is valid.  Assume the runs of one version are exchangeable (same
model, same data, same conditions: the order in which the runs were made
tells nothing), and that the edit has no effect.  Then a base run and a
candidate run of the same task are exchangeable as well, so given everything
seen before, ``d`` is symmetric about 0 and ``E[1 + lam * d] = 1`` for any
predictable ``lam``.  The wealth is then a nonnegative martingale that starts
at 1, and Ville's inequality bounds the chance that it *ever* reaches
``1 / alpha`` by ``alpha`` — whichever task each pair is drawn on (as long as
the choice uses earlier pairs only) and whenever the test stops.  The bound
needs no assumption about how flaky a test is and no minimum sample size.

Two conditions on the runs make ``d`` symmetric, and the caller must keep
them: the base run of a pair must not have informed the choice of its task
(pair ``i`` of a task uses base repeat ``i``, which no earlier pair of this
candidate looked at), and no run is used twice for one candidate.  The base
runs of a version may be shared by all of its candidates.

Bets.  The first pair of every task (the **screen**, which covers every task
once, so no broken test goes unseen) stakes ``screen_bet``.  A task's later
pairs stake a Kelly estimate from that task's earlier pairs,
``sum(d) / (sum(d**2) + prior)`` clipped to ``[0, cap]``: zero for a task whose
pairs do not favour the candidate, growing towards ``cap`` while they keep
agreeing.  Weighted tasks scale their bets by ``weight / max weight``.

Allocation and stopping.  After the screen, each round draws one more pair
on every **active** task: one whose score is positive and that has fewer than
``task_cap`` pairs.  The score adds a win as ``d``, a loss as ``loss_weight *
d`` and a tie as ``-tie_penalty``, roughly how much each says about whether the
edit helped this task: on a flaky test that the edit took from passing 30 % of
the time to 80 %, a pair is won 56 % of the time, lost 6 % and tied 38 %,
against 24 %, 24 % and 52 % on a test it left alone, so a loss weighs much
more than a win and a tie much less (1.6 and 0.45 by default).  A task on which
every pair agreed (``d = 0``) is therefore never sampled again, and a task the
candidate keeps winning gets ever larger bets.  The test accepts when, with the
screen complete, the wealth has reached ``1 / alpha`` and the weighted mean of
the tasks' mean ``d`` is positive (if it is not, the tasks that look worse get
more pairs, with no bet, to tell a broken test from one unlucky run); it
rejects for futility when no task is active, when the wealth falls below
``floor``, or when the pair budget is spent.  Before giving up because no
task is active, a test whose wealth is still at least ``rescreen_wealth``
gives every task whose one pair tied a second pair at the screen's bet (once):
a real improvement on a flaky test ties its first pair about a third of the
time, and without this second look it would never be seen again.  When every
pair so far tied there is no second look: that is a suite of deterministic
tests the edit did not change, and their second pairs would tie as well.  Stopping
for futility can only lower the false-accept rate, and accepting on the
wealth's running maximum is covered by Ville's inequality, which bounds the
maximum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent_core.stats.samples import (
    AcceptanceDecision,
    TaskSamples,
    check_same_tasks,
    find_flips,
    flip_summary,
)

DEFAULT_ALPHA = 0.05
"""The false-accept bound of the default policy: accept at wealth >= 1 / 0.05 = 20.

Ville's inequality makes it a bound, not an estimate, so it is set at the 5 %
the acceptance criteria allow; the simulated rate is lower (docs/statistics.md)."""


def kelly_bet(diffs: Sequence[float], cap: float, prior: float = 1.0) -> float:
    """The stake for the next pair of a task, from that task's earlier differences only.

    ``sum(d) / (sum(d**2) + prior)`` is the Kelly-optimal fraction
    ``E[d] / E[d**2]`` shrunk towards 0 by ``prior`` pseudo-pairs (with the
    policy's 1: 1/2 after one win, 2/3 after two, 3/4 after three).  Clipped to
    ``[0, cap]``: the gambler never bets on the base (that would test the other
    direction) and never stakes everything.
    """
    total = math.fsum(diffs)
    if total <= 0.0:
        return 0.0
    return min(cap, total / (math.fsum(d * d for d in diffs) + prior))


@dataclass
class _Task:
    weight: float
    diffs: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    candidate: list[float] = field(default_factory=list)

    @property
    def pairs(self) -> int:
        return len(self.diffs)

    @property
    def won(self) -> int:
        return sum(1 for d in self.diffs if d > 0)

    @property
    def lost(self) -> int:
        return sum(1 for d in self.diffs if d < 0)

    @property
    def tied_once(self) -> bool:
        """One pair so far, and it tied: the task a second look is for."""
        return self.diffs == [0.0]


class BettingTest:
    """The state of one candidate's test: which pairs to buy next, the wealth, the verdict.

    Drive it with :meth:`next_batch` (tasks to draw one more pair on; empty
    once decided) and :meth:`add` (one pair's base and candidate rewards),
    then read :meth:`decision`.  Every task of a batch gets its bet from the
    pairs before the batch, so the runs of a batch may be made in parallel.
    """

    def __init__(self, policy: BettingPolicy, tasks: Sequence[str],
                 weights: Mapping[str, float] | None = None) -> None:
        ids = list(dict.fromkeys(tasks))
        if not ids:
            raise ValueError("no tasks: a betting test needs at least one task to pair")
        weights = dict(weights or {})
        self.policy = policy
        self.tasks: dict[str, _Task] = {t: _Task(float(weights.get(t, 1.0))) for t in ids}
        self._top_weight = max(task.weight for task in self.tasks.values())
        self.wealth = 1.0
        self.peak = 1.0
        self.pairs = 0
        self.budget = max(len(ids) + policy.min_extra, math.ceil(policy.repeats * len(ids)))
        self._stop: str | None = None
        self._rescreened = False
        #: The rest of this round's draw, bought only if the pairs before it do not convince.
        self._queue: list[str] = []

    # ------------------------------------------------------------ betting

    def bet(self, task: str) -> float:
        """The stake on ``task``'s next pair (from its earlier pairs only)."""
        state = self.tasks[task]
        scale = state.weight / self._top_weight
        if state.pairs == 0 or state.tied_once:
            # The screen, and the second look at a task whose screen pair tied.
            return self.policy.screen_bet * scale
        return kelly_bet(state.diffs, self.policy.cap, self.policy.prior) * scale

    def add(self, task: str, base: float, candidate: float) -> None:
        """Record one pair and multiply the wealth by ``1 + bet * (candidate - base)``."""
        if task not in self.tasks:
            raise ValueError(f"task {task!r} is not part of this test")
        for value in (base, candidate):
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"task {task!r}: reward {value!r} is not in [0, 1]")
        stake = self.bet(task)
        d = float(candidate) - float(base)
        state = self.tasks[task]
        state.diffs.append(d)
        state.base.append(float(base))
        state.candidate.append(float(candidate))
        self.wealth *= 1.0 + stake * d
        self.peak = max(self.peak, self.wealth)
        self.pairs += 1

    # ------------------------------------------------------------ allocation

    @property
    def screened(self) -> bool:
        return all(state.pairs > 0 for state in self.tasks.values())

    def active(self) -> list[str]:
        """Tasks that earn another pair for the evidence.

        Its :meth:`score` is positive (the pairs favour the candidate: a task
        that keeps tying or has lost is not where the evidence is), its last
        pair was not lost (with ``stop_on_loss``), and it has fewer than
        ``task_cap`` pairs.
        """
        cap = self.policy.task_cap
        return [t for t, s in self.tasks.items()
                if s.pairs and (s.diffs[-1] >= 0.0 or not self.policy.stop_on_loss)
                and s.pairs < cap and self.score(t) > 0.0]

    def score(self, task: str) -> float:
        """How much ``task``'s pairs favour the candidate: wins, losses weighed, ties penalised.

        A graded pair counts in part: ``d > 0`` adds ``d``, ``d < 0`` adds
        ``loss_weight * d``, and each pair subtracts ``tie_penalty * (1 - |d|)``.
        """
        policy = self.policy
        return math.fsum((d if d >= 0.0 else policy.loss_weight * d)
                         - policy.tie_penalty * (1.0 - abs(d))
                         for d in self.tasks[task].diffs)

    def doubtful(self) -> list[str]:
        """Tasks whose pairs so far say the candidate is worse, with room for more pairs."""
        cap = self.policy.task_cap
        return [t for t, s in self.tasks.items()
                if s.pairs and math.fsum(s.diffs) < 0.0 and s.pairs < cap]

    def mean_difference(self) -> float:
        """Weighted mean over tasks of each task's mean ``d``: did the reward go up?"""
        seen = [s for s in self.tasks.values() if s.pairs]
        if not seen:
            return 0.0
        total = math.fsum(s.weight for s in seen)
        return math.fsum(s.weight * math.fsum(s.diffs) / s.pairs for s in seen) / total

    @property
    def threshold(self) -> float:
        return 1.0 / self.policy.alpha

    def next_batch(self) -> list[str]:
        """Tasks to draw one more pair on, in order; empty once the test has decided."""
        if self._stop is not None:
            return []
        if not self.screened:
            return [t for t, s in self.tasks.items() if s.pairs == 0]
        convinced = self.peak >= self.threshold
        if convinced and self.mean_difference() > 0.0:
            self._stop = "accept"
            return []
        if self._queue and not convinced:
            return self._enough(self._queue)  # the round goes on: no futility check mid-round
        self._queue = []
        if not convinced and self.wealth < self.policy.floor:
            self._stop = "floor"
            return []
        left = self.budget - self.pairs
        if left <= 0:
            self._stop = "budget"
            return []
        if convinced:
            # The evidence is there but the weighted mean did not rise: the tasks that
            # look worse get more pairs, to tell a broken test from one unlucky run.
            ranked = sorted(self.doubtful(), key=lambda t: self.tasks[t].pairs)
            if not ranked:
                self._stop = "direction"
            return ranked[:left]
        # Most promising first, so a budget that runs out cuts the least promising.
        ranked = sorted(self.active(), key=lambda t: -self.bet(t))
        if not ranked:
            ranked = self._second_look()
        if not ranked:
            self._stop = "exhausted"
            return []
        return self._enough(ranked[:left])

    def _enough(self, draw: list[str]) -> list[str]:
        """The head of ``draw`` that could convince the test if it won; the rest waits.

        A round draws one pair on every active task, most promising first.  If
        the first ``k`` of them winning would already take the wealth to the
        threshold, only those ``k`` are bought now; the others stay queued and
        are bought only if those ``k`` did not convince.  Every queued task keeps
        the bet it was ranked with (its pairs do not change while it waits), so
        the allocation is the round's; only the pairs after a decision are saved.
        """
        wealth = self.wealth
        for count, task in enumerate(draw, start=1):
            wealth *= 1.0 + self.bet(task)
            if wealth >= self.threshold:
                self._queue = draw[count:]
                return draw[:count]
        self._queue = []
        return draw

    def _second_look(self) -> list[str]:
        """Tasks whose single pair tied, once, while the wealth says the test is still open."""
        if self._rescreened or self.wealth < self.policy.rescreen_wealth:
            return []
        if all(d == 0.0 for state in self.tasks.values() for d in state.diffs):
            # Every pair tied: a suite of deterministic tests the edit did not touch,
            # where a second pair would tie again.  (A flaky suite ties everywhere
            # only by chance, and nearly never on many tasks at once.)
            return []
        self._rescreened = True
        return [t for t, s in self.tasks.items() if s.tied_once]

    # ------------------------------------------------------------ verdict

    def samples(self) -> tuple[TaskSamples, TaskSamples]:
        """The runs the pairs used, as (base, candidate) samples (every task screened)."""
        weights = {t: s.weight for t, s in self.tasks.items() if s.weight != 1.0}
        base = TaskSamples({t: s.base for t, s in self.tasks.items() if s.pairs}, weights)
        cand = TaskSamples({t: s.candidate for t, s in self.tasks.items() if s.pairs}, weights)
        return base, cand

    def evidence(self) -> str:
        """The evidence in words: "evidence 41x (needs 29x): 3 tests won 5 of 5 pairs, ..."."""
        won = [s for s in self.tasks.values() if s.won > s.lost]
        lost = [s for s in self.tasks.values() if s.lost > s.won]
        groups: dict[tuple[int, int], int] = {}
        for s in won:
            groups[(s.won, s.pairs)] = groups.get((s.won, s.pairs), 0) + 1
        parts = [f"{n} test{'s' if n > 1 else ''} better in {w} of {p} pair{'s' if p > 1 else ''}"
                 f"{' each' if n > 1 else ''}"
                 for (w, p), n in sorted(groups.items(), key=lambda kv: (-kv[0][0], -kv[1]))]
        better = ", ".join(parts[:4]) + (f", {len(parts) - 4} more kinds" if len(parts) > 4
                                         else "")
        worse = ("none worse" if not lost
                 else f"{len(lost)} test{'s' if len(lost) > 1 else ''} worse in more pairs "
                 "than better")
        return (f"evidence {self.peak:.3g}x (needs {self.threshold:.3g}x) after "
                f"{self.pairs} pairs: {better or 'no test better'}; {worse}")

    def decision(self) -> AcceptanceDecision:
        """The verdict on the pairs so far (a test that has not stopped is judged as it stands)."""
        from agentdescent_core.stats.beta import posterior_improvement

        base, cand = self.samples()
        flips = find_flips(base, cand)
        reward_b, reward_c = base.reward(), cand.reward()
        p_improvement = posterior_improvement(
            base, cand, draws=self.policy.posterior_draws, seed=self.policy.seed)
        up = self.mean_difference() > 0.0
        accept = self.screened and self.peak >= self.threshold and up
        if accept:
            why = f"accepted, {self.evidence()}"
        elif self.screened and self.peak >= self.threshold:
            why = f"rejected: {self.evidence()}, but the weighted mean reward did not rise"
        else:
            stop = {"floor": f"wealth fell below {self.policy.floor:g}",
                    "budget": f"the budget of {self.budget} pairs is spent",
                    "exhausted": "no task's pairs favour the candidate any more",
                    }.get(self._stop or "", "not decided")
            why = f"rejected ({stop}): {self.evidence()}"
        return AcceptanceDecision(
            accept=accept,
            category="committed" if accept else "below-threshold",
            p_improvement=p_improvement,
            p_value=min(1.0, 1.0 / self.peak),
            threshold=self.policy.alpha,
            reward_base=reward_b,
            reward_candidate=reward_c,
            flips=flips,
            reason=(f"{why}; reward {reward_b:.3f} -> {reward_c:.3f}; "
                    f"P(improvement)={p_improvement:.2f}; {flip_summary(flips)}"),
            more_repeats=0,
            policy=self.policy.name,
        )


@dataclass(frozen=True)
class BettingPolicy:
    """The default acceptance policy: a paired test by betting (see the module docstring).

    ``repeats`` is the pair budget per task on average: a candidate may buy at
    most ``repeats * tasks`` pairs (the screen included; at least ``tasks +
    min_extra``, so that on a small suite one fixed test can still cross the
    threshold, which takes 7 pairs), and one task at most ``task_cap``.  The
    defaults were tuned on the simulated suites of ``docs/statistics.md``
    (``python -m bench.acceptance``).  ``alpha`` bounds
    the false-accept rate of a candidate that changes nothing (accept at
    wealth ``1 / alpha``), whatever the allocation and whenever the test
    stops; ``floor`` is the wealth below which it gives up; ``rescreen_wealth``
    the wealth at which, with no task active, the tasks whose screen pair tied
    get a second pair (``math.inf`` turns the second look off); ``tie_penalty``
    and ``loss_weight`` how a tie and a loss count against a task staying
    active (:meth:`BettingTest.score`).  ``version`` is
    accepted for the protocol and ignored (the bound holds at every version).

    :meth:`open` starts a sequential test that the caller feeds pair by pair
    (the aggregator does, buying only the pairs asked for); :meth:`decide`
    replays samples already measured, pair ``i`` of a task being base run
    ``i`` against candidate run ``i``, for callers that hold samples.
    """

    repeats: float = 6.0
    alpha: float = DEFAULT_ALPHA
    screen_bet: float = 0.3
    cap: float = 0.7
    task_cap: int = 60
    prior: float = 1.0
    tie_penalty: float = 0.45
    loss_weight: float = 1.6
    stop_on_loss: bool = False
    min_extra: int = 10
    floor: float = 0.05
    rescreen_wealth: float = 0.5
    posterior_draws: int = 2000
    seed: int = 0

    name = "betting"

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not self.repeats >= 1:
            raise ValueError(f"repeats (pairs per task) must be at least 1, got {self.repeats}")
        for name in ("screen_bet", "cap"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.min_extra < 0:
            raise ValueError(f"min_extra must be >= 0, got {self.min_extra}")
        if self.task_cap < 1:
            raise ValueError(f"task_cap must be at least 1, got {self.task_cap}")
        if self.prior <= 0.0:
            raise ValueError(f"prior must be positive, got {self.prior}")
        if self.tie_penalty < 0.0:
            raise ValueError(f"tie_penalty must be >= 0, got {self.tie_penalty}")
        if self.loss_weight < 0.0:
            raise ValueError(f"loss_weight must be >= 0, got {self.loss_weight}")
        if not 0.0 <= self.floor < 1.0:
            raise ValueError(f"floor must be in [0, 1), got {self.floor}")
        if not self.rescreen_wealth >= 0.0:
            raise ValueError("rescreen_wealth must be >= 0 (math.inf: never take a second "
                             f"look), got {self.rescreen_wealth}")

    def open(self, tasks: Sequence[str], weights: Mapping[str, float] | None = None
             ) -> BettingTest:
        """A fresh test of one candidate on ``tasks`` (a task missing from ``weights``: 1.0)."""
        return BettingTest(self, tasks, weights)

    def decide(
        self, base: TaskSamples, candidate: TaskSamples, *, version: int = 0
    ) -> AcceptanceDecision:
        check_same_tasks(base, candidate)
        test = self.open(base.tasks, dict(base.weights))
        used = dict.fromkeys(base.tasks, 0)
        while batch := test.next_batch():
            progressed = False
            for task in batch:
                i = used[task]
                if i < min(base.repeats(task), candidate.repeats(task)):
                    test.add(task, base.rewards[task][i], candidate.rewards[task][i])
                    used[task] = i + 1
                    progressed = True
            if not progressed:
                break
        return test.decision()
