"""Scheduled sessions: the evolve-or-skip rule and the history kept on a git ref."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import user_git, write

from agentdescent_core.errors import LedgerError
from agentdescent_core.loop.schedule import (
    SessionEntry,
    SessionHistory,
    decide_session,
    degradation_of,
    sessions_ref,
)

TASKS = ("t::a", "t::b")


def entry(baseline: float | None, final: float | None, *, accepted: int = 0,
          error: str | None = None, tasks: tuple[str, ...] = TASKS,
          evolved: bool = True) -> SessionEntry:
    return SessionEntry(started_at=0.0, base="b" * 40, baseline=baseline, final=final,
                        evolved=evolved, decision="evolve" if evolved else "skip",
                        reason="", tasks=tasks, error=error, accepted=accepted)


def decide(history: list[SessionEntry], baseline: float | None = 0.8, *,
           patience: int | None = 2, tasks: tuple[str, ...] = TASKS):
    return decide_session(history, baseline=baseline, tasks=tasks, patience=patience,
                          degradation=0.15)


def test_without_patience_every_session_evolves() -> None:
    stagnant = [entry(0.8, 0.8)] * 5
    decision = decide(stagnant, patience=None)
    assert decision.evolve
    assert decision.code == "always"


def test_the_first_session_evolves() -> None:
    decision = decide([])
    assert decision.evolve
    assert decision.code == "first-session"


def test_sessions_that_do_not_beat_the_best_count_toward_patience() -> None:
    improved = entry(0.5, 0.8, accepted=2)
    assert decide([improved]).code == "improving"
    assert decide([improved, entry(0.8, 0.8)]).code == "improving"
    stagnant = decide([improved, entry(0.8, 0.8), entry(0.8, 0.8, evolved=False)])
    assert not stagnant.evolve
    assert stagnant.code == "stagnant"
    assert "0.800" in stagnant.reason


def test_a_session_that_beats_the_best_resets_the_count() -> None:
    history = [entry(0.5, 0.8, accepted=1), entry(0.8, 0.8), entry(0.8, 0.8),
               entry(0.8, 0.9, accepted=1)]
    assert decide(history, 0.9).code == "improving"


def test_errored_sessions_are_ignored_not_counted_as_stagnation() -> None:
    history = [entry(0.5, 0.8, accepted=1), entry(0.8, 0.95, accepted=3, error="boom"),
               entry(0.8, 0.8)]
    decision = decide(history)
    assert decision.code == "improving"
    assert decision.best == 0.8  # the errored session's high reward never counts


def test_degradation_is_the_mean_of_the_last_three_against_the_best_of_the_first_three(
        ) -> None:
    # the version in use scored 0.9 when it was accepted, then 0.9 and 0.9 as baselines
    history = [entry(0.5, 0.9, accepted=1), entry(0.9, 0.9), entry(0.9, 0.9)]
    # one bad baseline: the last three average (0.9 + 0.9 + 0.7) / 3 = 0.833, 7 % down
    assert decide(history, 0.7).code == "stagnant"
    # a worse one: (0.9 + 0.9 + 0.3) / 3 = 0.7, 22 % down
    degraded = decide(history, 0.3)
    assert degraded.evolve
    assert degraded.code == "degraded"
    assert "0.700" in degraded.reason
    assert "0.900" in degraded.reason
    assert "22%" in degraded.reason


def test_the_drop_is_relative_to_the_reward_scale() -> None:
    # 0.1 below a best of 0.5 is a 20 % drop, though less than 0.15 in absolute terms
    history = [entry(0.3, 0.5, accepted=1), entry(0.4, 0.4), entry(0.4, 0.4)]
    decision = decide(history, 0.4)
    assert decision.code == "degraded"
    series = degradation_of(history, 0.4)
    assert series is not None
    assert series.first == (0.5, 0.4, 0.4)
    assert series.recent == (0.4, 0.4, 0.4)
    assert series.relative == pytest.approx(0.2)


def test_degradation_needs_a_minimum_number_of_sessions() -> None:
    history = [entry(0.5, 0.9, accepted=1)]
    # two measurements of the version (0.9 accepted, 0.1 now): too few to judge
    assert degradation_of(history, 0.1) is None
    assert decide(history, 0.1).code == "improving"
    assert decide_session(history, baseline=0.1, tasks=TASKS, patience=2,
                          degradation=0.15, min_sessions=2).code == "degraded"


def test_an_improvement_starts_the_series_again() -> None:
    # the old version decayed, then a session improved it to 0.6: judged from 0.6 on
    history = [entry(0.9, 0.9, accepted=0), entry(0.5, 0.5), entry(0.4, 0.6, accepted=1),
               entry(0.6, 0.6)]
    series = degradation_of(history, 0.6)
    assert series is not None
    assert series.first == (0.6, 0.6, 0.6)
    assert decide(history, 0.6).code != "degraded"


def test_errored_sessions_and_missing_baselines_do_not_enter_the_series() -> None:
    history = [entry(0.5, 0.9, accepted=1), entry(0.1, 0.1, error="boom"), entry(None, None),
               entry(0.9, 0.9)]
    series = degradation_of(history, 0.9)
    assert series is not None
    assert series.first == (0.9, 0.9, 0.9)
    assert degradation_of(history, None) is None


def test_a_new_marked_test_evolves_again() -> None:
    history = [entry(0.5, 0.9, accepted=1), entry(0.9, 0.9), entry(0.9, 0.9)]
    decision = decide(history, 0.6, tasks=(*TASKS, "t::new"))
    assert decision.evolve
    assert decision.code == "tests-added"
    assert decision.new_tests == ("t::new",)


def test_history_is_committed_on_its_own_ref_and_read_back(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    user_git(repo, "init", "--quiet", "--initial-branch=main")
    write(repo / "a.txt", "a\n")
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "a")
    head, status = user_git(repo, "rev-parse", "HEAD"), user_git(repo, "status", "--porcelain")

    with SessionHistory(repo) as history:
        assert history.entries() == []
        first = history.append(entry(0.5, 0.8, accepted=1))
        second = history.append(entry(0.8, 0.8))
        read = history.entries()

    assert [e.final for e in read] == [0.8, 0.8]
    assert read[0].improved
    assert not read[1].improved
    ref = sessions_ref("agentdescent/")
    assert ref == "refs/agentdescent/sessions"
    assert user_git(repo, "rev-parse", ref) == second
    assert user_git(repo, "rev-parse", f"{ref}~1") == first
    stored = json.loads(user_git(repo, "show", f"{ref}:sessions.json"))
    assert len(stored["sessions"]) == 2
    # nothing of the user's moved
    assert user_git(repo, "rev-parse", "HEAD") == head
    assert user_git(repo, "status", "--porcelain") == status
    assert "agentdescent" not in user_git(repo, "branch", "--list")


def test_an_unreadable_history_says_how_to_start_over(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    user_git(repo, "init", "--quiet", "--initial-branch=main")
    write(repo / "a.txt", "a\n")
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "a")
    user_git(repo, "update-ref", "refs/agentdescent/sessions", "HEAD")
    with SessionHistory(repo) as history, pytest.raises(LedgerError) as caught:
        history.entries()
    assert "git update-ref -d refs/agentdescent/sessions" in str(caught.value)
