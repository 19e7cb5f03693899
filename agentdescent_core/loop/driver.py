"""What the synchronous and the asynchronous drivers share: measuring, stopping, reporting.

Both drivers keep the same books: the head reward (measured through the
aggregator, so through the one verifier), the best reward and the rounds
since it improved (patience), the worker-failure tolerance, the error that
ended the run and the stop reason.  The end of a run is the same too:
promote at a clean finish, read the final head, and build the
:class:`EvolutionResult` even when the ledger is failing.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

from agentdescent_core.errors import BackendError, LedgerError
from agentdescent_core.evaluation.callable import callable_name
from agentdescent_core.loop.budget import BudgetExhausted
from agentdescent_core.loop.durations import Straggler
from agentdescent_core.loop.result import EvolutionResult, RoundInfo
from agentdescent_core.loop.setup import RunParts
from agentdescent_core.stops import StopReason

_IMPROVEMENT_EPS = 1e-12


def describe_error(exc: BaseException) -> str:
    """``"<ExcType>: <message>"``, the form ``EvolutionResult.error`` takes."""
    return f"{type(exc).__name__}: {exc}"


class DriverBase:
    """Books and end-of-run logic shared by ``evolve()`` and ``async_evolve()``."""

    def __init__(
        self,
        parts: RunParts,
        *,
        n_workers: int,
        on_round: Callable[[RoundInfo], object] | None,
        target_reward: float | None,
        patience: int | None,
        max_worker_errors: int,
    ) -> None:
        self.parts = parts
        self.n_workers = n_workers
        self.on_round = on_round
        self.target_reward = target_reward
        self.patience = patience
        self.max_worker_errors = max_worker_errors
        self.history: list[RoundInfo] = []
        self.error: str | None = None
        self.stop_reason: StopReason | None = None
        self.retired_workers = 0
        self.forced_refreshes = 0
        self.stragglers: list[Straggler] = []  # rollouts that overran their prediction
        self.reward: float | None = None
        self.initial_reward: float | None = None
        self.best: float | None = None
        self.since_best = 0
        self.measured_version: int | None = None
        self._failed_version: int | None = None
        self.version = 0
        self.state: dict[str, str] = {}
        self.counters = {"rollouts": 0, "proposals": 0, "worker_errors": 0,
                         "self_verify_rejected": 0, "merge_errors": 0}
        self._warned: set[str] = set()
        self._books = threading.Lock()

    # ------------------------------------------------------------ measuring

    def read_head(self) -> None:
        """Refresh ``version`` / ``state`` from the aggregator (LedgerError propagates)."""
        self.version, self.state = self.parts.aggregator.head()

    def measure(self) -> float | None:
        """The head's eval-task reward; on a backend failure the last one carries forward.

        Measured only when the head moved (or never was), so an unchanged head
        costs nothing; before the backend has ever worked, a failed measurement
        is not retried every round (it cannot tell anything new).
        """
        self.read_head()
        if self.measured_version == self.version:
            return self.reward
        if self._failed_version == self.version and not self.parts.verifier.ever_succeeded:
            return self.reward
        try:
            value = float(self.parts.aggregator.head_reward())
        except BackendError as exc:
            self._failed_version = self.version
            self.warn_once("measure", f"could not measure the head reward ({describe_error(exc)}); "
                                      "the last measured reward carries forward")
            return self.reward
        self.reward = value
        self.measured_version = self.version
        return value

    def note_reward(self, reward: float | None) -> None:
        """Update best / rounds-since-best for patience."""
        if reward is None:
            self.since_best += 1
            return
        if self.best is None or reward > self.best + _IMPROVEMENT_EPS:
            self.best = reward
            self.since_best = 0
        else:
            self.since_best += 1

    def stop_check(self, reward: float | None) -> StopReason | None:
        """"target_reward" / "patience" when early stopping says so, else None."""
        if self.target_reward is not None and reward is not None and reward >= self.target_reward:
            return StopReason.TARGET_REWARD
        if self.patience is not None and self.since_best >= self.patience:
            return StopReason.PATIENCE
        return None

    # ------------------------------------------------------------ reporting

    def warn_once(self, key: str, message: str) -> None:
        with self._books:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def emit(self, info: RoundInfo) -> None:
        """Record a round and tell ``on_round``; its exceptions become warnings."""
        self.history.append(info)
        if self.on_round is None:
            return
        try:
            self.on_round(info)
        except Exception as exc:
            warnings.warn(
                f"on_round callback {callable_name(self.on_round)} raised {describe_error(exc)} at "
                f"round {info.round}; the run continues",
                RuntimeWarning, stacklevel=2,
            )

    def fail(self, exc: BaseException) -> None:
        """The run ends on ``exc`` (a dead backend or a failing ledger)."""
        if self.error is None:
            self.error = describe_error(exc)
        self.stop_reason = StopReason.ERROR

    def end_on_budget(self, exc: BudgetExhausted) -> None:
        if self.stop_reason is None:
            self.stop_reason = exc.reason

    # ------------------------------------------------------------ the end

    def finish(self, *, asynchronous: bool) -> EvolutionResult:
        """Promote on a clean finish, read the final head and reward, build the result."""
        agg = self.parts.aggregator
        if self.error is None:
            try:
                agg.finish(clean=True)
            except LedgerError as exc:
                self.fail(exc)
            except (BackendError, BudgetExhausted) as exc:
                self.warn_once("finish", f"promotion at the end was skipped: {describe_error(exc)}")
        final = self.reward
        try:
            if self.error is None and not self.parts.budget.exhausted:
                final = self.measure()
            else:
                self.read_head()
        except LedgerError as exc:
            self.fail(exc)  # keep the last state this run read
        except BudgetExhausted:
            pass
        if self.error is not None:
            warnings.warn(f"the run ended on an error: {self.error}; the artifact evolved so far "
                          "is returned", RuntimeWarning, stacklevel=3)
        usage: dict[str, float] = dict(self.parts.budget.usage())
        usage.update({k: float(v) for k, v in self.parts.verifier.usage().items()})
        usage.update({k: float(v) for k, v in self.counters.items()})
        return EvolutionResult(
            rendered=self.parts.strategy.render(self.state),
            state=dict(self.state),
            final_reward=final,
            initial_reward=self.initial_reward,
            history=list(self.history),
            ledger_log=self.parts.ledger_log(),
            error=self.error,
            stop_reason=self.stop_reason or StopReason.ROUNDS,
            retired_workers=self.retired_workers,
            usage=usage,
            version=self.version,
            forced_refreshes=self.forced_refreshes,
            repo_path=None if self.parts.scratch else str(self.parts.ledger.repo_path),
            asynchronous=asynchronous,
            stragglers=list(self.stragglers),
        )
