"""The one line a plain ``pytest`` run adds: "evolve: N tasks, reward R".

Without ``--evolve`` the plugin changes nothing about a run except this line,
so a developer sees the current reward of the agent every time the suite runs.
A task counts when it ran to an outcome with a reward: passed / xpassed (1.0,
or the ``evolve_reward`` value), failed (0.0, or the recorded value), an error
in setup or teardown (0.0); skipped and xfailed tests are not tasks.  The
reward is the weighted mean over tasks, weights from ``evolve(weight=...)`` —
the same rules the evolution's evaluation uses (``recorder.combine_reports``).

The marker's weight and the recorded reward travel on the test report itself,
so the line is right under pytest-xdist too, where tests run in other processes.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_agentdescent.markers import read_marker
from pytest_agentdescent.reward import recorded_reward

#: Attributes set on the reports of marked tests (kept by xdist's serialization).
WEIGHT_ATTR = "evolve_weight"
REWARD_ATTR = "evolve_reward"


def format_line(tasks: int, reward: float) -> str:
    """The summary line for ``tasks`` tasks of weighted mean reward ``reward``."""
    noun = "task" if tasks == 1 else "tasks"
    return f"evolve: {tasks} {noun}, reward {reward:.3f}"


class RewardSummary:
    """Collects the reward of every marked test of this run; writes the line at the end."""

    def __init__(self) -> None:
        self._pending: dict[str, list[pytest.TestReport]] = {}
        #: nodeid -> (weight, reward) of every task that earned a reward
        self.results: dict[str, tuple[float, float]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        marker = read_marker(item)
        if marker is not None:
            setattr(report, WEIGHT_ATTR, marker.weight)
            setattr(report, REWARD_ATTR, recorded_reward(item))
        return report

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        weight = getattr(report, WEIGHT_ATTR, None)
        if weight is None:
            return
        reports = self._pending.setdefault(report.nodeid, [])
        reports.append(report)
        if report.when != "teardown":
            return
        del self._pending[report.nodeid]
        # The recorder is the child runs' plugin; a plain run loads it at its first task.
        from pytest_agentdescent.recorder import combine_reports

        record = combine_reports(report.nodeid, 0, reports,
                                 reward=getattr(report, REWARD_ATTR, None), output_chars=200)
        reward = record["reward"]
        if reward is None:  # skipped or xfailed: not a task of this run
            self.results.pop(report.nodeid, None)
        else:
            self.results[report.nodeid] = (float(weight), float(reward))

    def reward(self) -> float | None:
        """The weighted mean reward of the tasks that ran, or None when none did."""
        total = sum(weight for weight, _ in self.results.values())
        if not self.results or total <= 0:
            return None
        return sum(weight * reward for weight, reward in self.results.values()) / total

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        reward = self.reward()
        if reward is not None:
            terminalreporter.write_line(format_line(len(self.results), reward))
