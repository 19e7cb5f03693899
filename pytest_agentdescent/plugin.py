"""The pytest plugin entry point (``pytest11: agentdescent``).

It registers the options and ini keys (``settings.KNOBS``), the hookspecs
(``hooks``), the markers and the ``evolve_reward`` fixture, validates the
settings in ``pytest_configure``, and then either hands the run to the
evolution controller (``--evolve PATH``, ``session.EvolveSession``, which takes
over the test loop the way pytest-xdist's DSession does) or stays a plain run
that only adds the "evolve: N tasks, reward R" summary line.

This module is imported by every pytest run in an environment where the package
is installed, so it stays thin: the controller and everything heavy it needs
(git, numpy, the SDKs) are imported only when ``--evolve`` is given.
"""

from __future__ import annotations

import os

import pytest

from agentdescent_core.evaluation.journal import CHILD_ENV
from pytest_agentdescent.markers import (
    EVOLVE_MARKER,
    GUARD_MARKER,
    mark_selected_tasks,
    validate_markers,
)
from pytest_agentdescent.reward import evolve_reward as evolve_reward
from pytest_agentdescent.settings import EvolveSettings, add_options, read_settings

SESSION_NAME = "agentdescent-session"
SUMMARY_NAME = "agentdescent-summary"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_agentdescent import hooks

    pluginmanager.add_hookspecs(hooks)


def _xdist_in_use(config: pytest.Config) -> tuple[str, str] | None:
    """How pytest-xdist was asked to distribute this run, and the option that undoes it.

    Both come back as command-line text: ``("-n 4", "-n 0")``.  The undoing
    option is always one that keeps xdist loaded: ``-p no:xdist`` would leave
    an ``-n`` from ``addopts`` unrecognized and fail the run with a usage error.
    """
    numprocesses = config.getoption("numprocesses", None)
    if numprocesses:
        return f"-n {numprocesses}", "-n 0"
    dist = config.getoption("dist", "no")
    if dist and dist != "no":
        return f"--dist {dist}", "--dist no"
    if config.getoption("tx", None):
        return "--tx", "-n 0 --dist no"
    return None


def _refuse_xdist(config: pytest.Config) -> None:
    found = _xdist_in_use(config)
    if found is None:
        return
    how, undo = found
    raise pytest.UsageError(
        f"--evolve cannot run under pytest-xdist ({how}): the evolution controller takes "
        "over the test loop and already runs candidates' tests in its own sandboxed "
        f"processes. Add {undo} to the --evolve command line (later options win over "
        "addopts); for parallelism use --evolve-workers and the evolve_eval_concurrency "
        "ini key"
    )


def _start_controller(config: pytest.Config, settings: EvolveSettings) -> None:
    from pytest_agentdescent.session import EvolveSession

    config.pluginmanager.register(EvolveSession(config, settings), SESSION_NAME)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", EVOLVE_MARKER)
    config.addinivalue_line("markers", GUARD_MARKER)
    if os.environ.get(CHILD_ENV) == "1":
        # A child evaluating a candidate: always a plain run, whatever the ini says.
        config.pluginmanager.register(_summary(), SUMMARY_NAME)
        return
    if config.getoption("help", False):
        return  # --help must work even while an ini value is wrong
    settings = read_settings(config)
    if settings.enabled:
        _refuse_xdist(config)
        _start_controller(config, settings)
    else:
        config.pluginmanager.register(_summary(), SUMMARY_NAME)


def _summary() -> object:
    from pytest_agentdescent.summary import RewardSummary

    return RewardSummary()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(CHILD_ENV) != "1":  # a child runs planned node ids, markers or not
        expression = read_settings(config).tasks
        if expression:
            mark_selected_tasks(items, expression)
    validate_markers(items)
