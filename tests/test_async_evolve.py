"""async_evolve(): the barrier-free driver, on real scratch ledgers.

The stub workload of tests/rulebook.py: 12 tasks in 4 categories, each
needing its category's rule; the held-out third holds one task per category.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from rulebook import CATS, HELD_OUT, Rulebook, rule

from agentdescent_core.aggregator import Aggregator
from agentdescent_core.errors import BackendError, ContractError
from agentdescent_core.evidence import EvidenceCard, MergeReport
from agentdescent_core.loop import DRIVER_REASONS, EvolutionResult, RoundInfo, async_evolve, evolve


def run_async(book: Rulebook, **kw: Any) -> EvolutionResult:
    kw.setdefault("held_out_frac", HELD_OUT)
    kw.setdefault("max_seconds", 10.0)
    return async_evolve(book.tasks, book.reward, run=book.run, propose=book.propose, **kw)


def test_async_learns_every_rule_and_stops_at_the_target() -> None:
    seen: list[RoundInfo] = []
    result = run_async(Rulebook(), n_workers=3, target_reward=1.0, on_round=seen.append)
    assert result.error is None
    assert result.asynchronous
    assert result.stop_reason == "target_reward"
    assert result.initial_reward == 0.0
    assert result.final_reward == 1.0
    assert all(rule(c) in result.rendered for c in CATS)
    assert seen == result.history
    assert [h.round for h in result.history] == list(range(1, len(result.history) + 1))
    assert result.outcomes()["committed"] == result.version


def test_evolve_asynchronous_true_is_async_evolve_and_warns_on_changed_arguments() -> None:
    book = Rulebook()
    with pytest.warns(RuntimeWarning) as caught:
        result = evolve(
            book.tasks, book.reward, run=book.run, propose=book.propose, held_out_frac=HELD_OUT,
            asynchronous=True, rounds=40, max_concurrency=2, round_timeout=5.0,
            refresh_interval=2, patience=30, target_reward=1.0,
        )
    messages = " | ".join(str(w.message) for w in caught)
    for name in ("max_concurrency=", "round_timeout=", "refresh_interval=", "rounds=",
                 "patience=", "max_seconds=None"):
        assert name in messages
    assert result.asynchronous
    assert result.stop_reason == "target_reward"


def test_the_backpressure_guard_forces_refreshes_when_nothing_commits() -> None:
    result = run_async(Rulebook(useless=True), n_workers=2, stall_patience=2, max_seconds=1.5,
                       max_iters=100_000)
    assert result.error is None
    assert result.forced_refreshes >= 1
    assert result.stop_reason == "max_seconds"
    assert result.outcomes().get("committed", 0) == 0
    assert sum(h.proposals for h in result.history) >= 2


def test_the_rollout_budget_ends_the_run_as_max_iters() -> None:
    book = Rulebook(useless=True)
    result = run_async(book, n_workers=2, max_iters=6)
    assert result.stop_reason == "max_iters"
    assert result.usage["proposals"] <= 6
    assert result.stop_reason in DRIVER_REASONS


def test_the_call_budget_ends_the_run_as_max_calls() -> None:
    result = run_async(Rulebook(useless=True), n_workers=2, max_calls=80)
    assert result.stop_reason == "max_calls"
    assert result.usage["calls"] <= 80


# With threads interleaving, one task can draw four failing calls in a row; the worker
# then warns and backs off, which is the behaviour under test, not noise to report.
@pytest.mark.filterwarnings("ignore:.*failed after its retries:RuntimeWarning")
def test_transient_failures_are_retried_and_the_run_still_learns() -> None:
    result = run_async(Rulebook(fail_every=3), n_workers=3, target_reward=1.0)
    assert result.error is None
    assert result.stop_reason == "target_reward"
    assert result.retired_workers == 0
    assert result.usage["retries"] > 0


def test_a_dead_backend_retires_every_worker_and_names_the_failure() -> None:
    started = time.monotonic()
    with pytest.warns(RuntimeWarning) as caught:
        result = run_async(Rulebook(dead=True), n_workers=3, max_worker_errors=2)
    assert any("ended on an error" in str(w.message) for w in caught)
    assert time.monotonic() - started < 5.0  # well under max_seconds=10: it stopped by itself
    assert result.stop_reason == "error"
    assert result.retired_workers == 3
    assert result.error is not None
    assert "ConnectionError: backend unreachable" in result.error


def test_the_merger_retries_a_failing_merge_and_never_ends_the_run() -> None:
    failures = {"left": 2}

    class Flaky(Aggregator):
        def step(self, cards: Any, round: int, **kwargs: Any) -> list[MergeReport]:
            if cards and failures["left"] > 0:
                failures["left"] -= 1
                raise BackendError("judge endpoint returned 503")
            return super().step(cards, round, **kwargs)

    result = run_async(Rulebook(), n_workers=2, target_reward=1.0,
                       aggregator_factory=lambda *args: Flaky(*args))
    assert result.error is None
    assert result.stop_reason == "target_reward"
    assert result.usage["merge_errors"] == 2


def test_a_contract_error_in_a_worker_propagates() -> None:
    book = Rulebook()
    with pytest.raises(ContractError, match="returned int"):
        async_evolve(book.tasks, book.reward, run=book.run, propose=lambda r, t, o, s: 5,
                     held_out_frac=HELD_OUT, max_seconds=5.0)


def test_on_round_exceptions_warn_and_the_run_goes_on() -> None:
    def explode(info: RoundInfo) -> None:
        raise RuntimeError("progress bar broke")

    with pytest.warns(RuntimeWarning, match="on_round callback .*explode"):
        result = run_async(Rulebook(), n_workers=2, target_reward=1.0, on_round=explode)
    assert result.stop_reason == "target_reward"


def test_self_verify_sets_before_and_after_on_cards() -> None:
    cards: list[EvidenceCard] = []

    class Recording(Aggregator):
        def step(self, batch: Sequence[EvidenceCard], round: int, *,
                 trailers: Mapping[str, str] | None = None) -> list[MergeReport]:
            cards.extend(batch)
            return super().step(batch, round, trailers=trailers)

    run_async(Rulebook(), n_workers=2, target_reward=1.0,
              aggregator_factory=lambda *args: Recording(*args))
    assert cards
    assert all(c.before == 0.0 and c.after == 1.0 for c in cards)
    cards.clear()
    run_async(Rulebook(), n_workers=2, target_reward=1.0, self_verify=False,
              aggregator_factory=lambda *args: Recording(*args))
    assert cards
    assert all(c.after is None for c in cards)
