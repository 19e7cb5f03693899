"""``verbose=True``: one line per round (or merger sweep) and one at the end, on stderr.

Why a line per round: an LLM run takes minutes to hours and ``history`` is only
there once ``evolve()`` returns; ``on_round`` is the programmable way to watch
it, ``verbose`` the no-code one.  Lines go to ``sys.stderr`` (looked up at each
write, so redirecting it works) and carry only numbers and merge categories,
never the artifact or a model's text, so nothing secret reaches a log.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from agentdescent_core.loop.result import EvolutionResult, RoundInfo

RoundCallback = Callable[[RoundInfo], object]


def _reward(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def round_line(info: RoundInfo, *, asynchronous: bool) -> str:
    """``evolve: round 3  reward 0.750  v2  proposals 4  committed 1, below-threshold 1``."""
    unit = "sweep" if asynchronous else "round"
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(info.reasons.items())) or "no merge"
    line = (f"evolve: {unit} {info.round}  reward {_reward(info.reward)}  v{info.version}  "
            f"proposals {info.proposals}  {reasons}")
    if info.worker_errors:
        line += f"  worker errors {info.worker_errors}"
    return line


def summary_line(result: EvolutionResult) -> str:
    """``evolve: done (rounds)  reward 0.250 -> 1.000  v1  error none``."""
    return (f"evolve: done ({result.stop_reason})  reward {_reward(result.initial_reward)} -> "
            f"{_reward(result.final_reward)}  v{result.version}  error {result.error or 'none'}")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def with_progress(on_round: RoundCallback | None, verbose: bool, *, asynchronous: bool
                  ) -> RoundCallback | None:
    """``on_round`` extended with the round line when ``verbose`` (printed first)."""
    if not isinstance(verbose, bool):
        raise ValueError(f"verbose must be True or False, got {verbose!r}")
    if not verbose:
        return on_round

    def report(info: RoundInfo) -> object:
        _say(round_line(info, asynchronous=asynchronous))
        return None if on_round is None else on_round(info)

    if on_round is not None:  # a warning about a failing callback names the caller's
        report.__qualname__ = getattr(on_round, "__qualname__", type(on_round).__name__)
    return report


def finish_progress(result: EvolutionResult, verbose: bool) -> EvolutionResult:
    """Print the summary line when ``verbose``; returns ``result`` unchanged."""
    if verbose:
        _say(summary_line(result))
    return result
