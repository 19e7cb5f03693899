"""What ``pytest --evolve`` would evolve, asked of pytest itself: the CLI's window on a plan.

``agentdescent check`` and ``agentdescent review`` must know exactly what a run
would collect — the artifact roots, the marked tasks and their split, the
guards, the frozen set, the notes — and that knowledge lives in the plugin's
collection, which needs the user's conftest files, ini file and plugins.  So
instead of re-deriving it, the CLI runs ``python -m pytest --collect-only
--evolve ... -p pytest_agentdescent.probe`` in a child process; this module,
loaded there as a plugin, writes the collected :class:`EvolvePlan` as JSON to
the file named by :data:`PROBE_ENV`.  Usage errors (a bad option or ini value,
a path outside the repository) and collection errors are written too, with
pytest's own message, so the parent can say precisely what is wrong.

With :data:`REQUIRE_ENV` set, the plugin only insists that evolution is on:
``agentdescent run`` loads it so that a run without artifact paths is a usage
error (exit 4) instead of silently becoming a plain test run.

The parent side is :func:`probe_plan`, which returns a :class:`ProbedPlan`.
Nothing here writes to the user's repository: the child runs without the
cache provider and without bytecode files, and ``--collect-only`` stops the
controller before it creates a ledger or a state directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from agentdescent_core.errors import AgentDescentError
from pytest_agentdescent.collect import EvolveTask, task_split

if TYPE_CHECKING:
    from agentdescent_core.evaluation.protocol import TaskSplit
    from agentdescent_core.governance import FrozenSet
    from pytest_agentdescent.collect import EvolvePlan
    from pytest_agentdescent.settings import EvolveSettings

#: The plugin's module name, as given to ``-p``.
PLUGIN = "pytest_agentdescent.probe"
#: Where the child writes the plan (a file path); unset: the plugin writes nothing.
PROBE_ENV = "AGENTDESCENT_PROBE_OUT"
#: Set to ``1``: refuse a run in which ``--evolve`` is not on (no paths, no ini key).
REQUIRE_ENV = "AGENTDESCENT_PROBE_REQUIRE"

#: The controller's plugin name (``pytest_agentdescent.plugin.SESSION_NAME``).
_SESSION = "agentdescent-session"
_FORMAT = 1

NO_PATHS_MESSAGE = (
    "no artifact paths: give the folders or files to evolve on the command line (e.g. "
    "`agentdescent check skills/`, `agentdescent run skills/`) or set evolve_paths in the "
    "[pytest] section of your ini file (which makes every plain pytest run an evolution)"
)


# ---------------------------------------------------------------- the parent's view

ProbedTask = EvolveTask  # the same record, read back from the child's JSON


@dataclass(frozen=True)
class ProbedPlan:
    """A collected plan, read back from the child's JSON.

    ``root`` is the git working tree the child collected in and ``subdir`` the
    pytest rootdir relative to it; ``roots``, ``test_files``, ``frozen_files``
    and ``frozen_patterns`` are repo-relative; node ids are rootdir-relative.
    ``settings`` holds the validated settings of the run (``EvolveSettings``
    as a JSON object) and ``inipath`` the ini file pytest used, if any.
    ``proposers`` lists where ``pytest_evolve_propose`` is implemented (conftest
    paths or plugin names), so ``check`` can refuse what ``--evolve`` would.
    """

    root: Path
    subdir: str
    roots: tuple[str, ...]
    tasks: tuple[ProbedTask, ...]
    guards: tuple[str, ...]
    test_files: tuple[str, ...]
    frozen_patterns: tuple[str, ...]
    frozen_files: tuple[str, ...]
    holdout_fraction: float
    notes: tuple[str, ...] = ()
    unmarked: int = 0
    inipath: str | None = None
    python_files: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict, repr=False)
    proposers: tuple[str, ...] = ()

    @property
    def train(self) -> tuple[str, ...]:
        return tuple(t.nodeid for t in self.tasks if not t.holdout)

    @property
    def held_out(self) -> tuple[str, ...]:
        return tuple(t.nodeid for t in self.tasks if t.holdout)

    @property
    def rootdir(self) -> Path:
        return self.root / self.subdir if self.subdir else self.root

    def frozen_set(self) -> FrozenSet:
        """The run's :class:`~agentdescent_core.governance.FrozenSet`, rebuilt."""
        from agentdescent_core.governance import FrozenSet

        return FrozenSet(self.frozen_patterns, artifact_roots=self.roots,
                         frozen_files=self.frozen_files)

    def split(self) -> TaskSplit:
        """The run's :class:`~agentdescent_core.evaluation.protocol.TaskSplit`, as the plugin
        makes it."""
        return task_split(self.tasks, self.guards)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["root"] = str(self.root)
        data.pop("sources")
        return data


class ProbeError(AgentDescentError):
    """Collecting the plan failed; ``kind`` says how and ``message`` is pytest's own text.

    ``kind``: ``usage`` (the plugin refused the configuration: a bad option or
    ini value, a path outside the repository, no marked test held in), ``no-paths``
    (evolution is not configured), ``collection`` (tests do not import or
    collect; ``errors`` holds one ``(node id, pytest's message)`` per failure)
    or ``internal`` (the child died without saying why; its output is kept).
    """

    def __init__(self, kind: str, message: str, *,
                 errors: Sequence[tuple[str, str]] = (), output: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.errors = tuple(errors)
        self.output = output


def plan_from_json(data: Mapping[str, Any]) -> ProbedPlan:
    """A :class:`ProbedPlan` from the ``plan`` object the child wrote."""
    return ProbedPlan(
        root=Path(data["root"]),
        subdir=str(data["subdir"]),
        roots=tuple(data["roots"]),
        tasks=tuple(ProbedTask(str(t["nodeid"]), float(t["weight"]), bool(t["holdout"]),
                               bool(t["explicit"])) for t in data["tasks"]),
        guards=tuple(data["guards"]),
        test_files=tuple(data["test_files"]),
        frozen_patterns=tuple(data["frozen_patterns"]),
        frozen_files=tuple(data["frozen_files"]),
        holdout_fraction=float(data["holdout_fraction"]),
        notes=tuple(data.get("notes", ())),
        unmarked=int(data.get("unmarked", 0)),
        inipath=data.get("inipath"),
        python_files=tuple(data.get("python_files", ())),
        settings=dict(data.get("settings", {})),
        sources=dict(data.get("sources", {})),
        proposers=tuple(str(p) for p in data.get("proposers", ())),
    )


def probe_plan(
    cwd: str | os.PathLike[str],
    *,
    paths: Sequence[str] = (),
    pytest_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> ProbedPlan:
    """Collect what ``pytest --evolve PATHS`` would evolve, run from ``cwd``.

    ``paths`` are given to ``--evolve`` as they are (relative to ``cwd``);
    without them the ini key ``evolve_paths`` decides.  ``pytest_args`` go to
    pytest after ours (``-c other.ini``, ``-k``, ``-m``: a selection changes
    the tasks, as it would in a run).  Raises :class:`ProbeError`.
    """
    from agentdescent_core.evaluation.journal import CHILD_ENV

    environ = dict(os.environ if env is None else env)
    environ.pop(CHILD_ENV, None)  # a child evaluation would be a plain run
    environ["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="agentdescent-probe-") as scratch:
        out = Path(scratch) / "plan.json"
        environ[PROBE_ENV] = str(out)
        environ.pop(REQUIRE_ENV, None)
        argv = [sys.executable, "-m", "pytest", "--collect-only", "-q",
                "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:benchmark", *_no_xdist()]
        for path in paths:
            argv += ["--evolve", path]
        argv += list(pytest_args)
        try:
            done = subprocess.run(argv, cwd=os.fspath(cwd), env=environ, capture_output=True,
                                  text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ProbeError("internal", f"collecting the tests in {os.fspath(cwd)} took longer "
                             f"than {timeout:g} s; look for a conftest or test module that "
                             "blocks at import") from None
        output = (done.stdout or "") + (done.stderr or "")
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            result = None
    if not isinstance(result, dict):
        raise ProbeError("usage" if done.returncode == 4 else "internal",
                         _stderr_error(done.stderr) or
                         f"pytest exited {done.returncode} while collecting, without a plan:\n"
                         + _tail(output), output=output)
    status = result.get("status")
    if status == "ok" and isinstance(result.get("plan"), dict):
        return plan_from_json(result["plan"])
    if status == "collection-error":
        errors = [(str(e["nodeid"]), str(e["message"])) for e in result.get("errors", ())]
        shown = "\n".join(f"ERROR collecting {nodeid or '(session)'}:\n{message.rstrip()}"
                          for nodeid, message in errors)
        raise ProbeError("collection", f"{len(errors)} error(s) while collecting the tests:\n"
                         + shown, errors=errors, output=output)
    if status in ("usage-error", "no-paths"):
        kind = "usage" if status == "usage-error" else "no-paths"
        raise ProbeError(kind, str(result.get("message", "")), output=output)
    raise ProbeError("internal", f"the probe wrote an unexpected result {status!r}:\n"
                     + _tail(output), output=output)


def _no_xdist() -> list[str]:
    """``-n 0`` where pytest-xdist is installed, so an ``-n`` in addopts cannot refuse --evolve."""
    import importlib.util

    return ["-n", "0"] if importlib.util.find_spec("xdist") is not None else []


def _stderr_error(stderr: str | None) -> str:
    """The message of pytest's ``ERROR: ...`` usage-error report, all its lines."""
    lines = (stderr or "").splitlines()
    for index, line in enumerate(lines):
        if line.startswith("ERROR: "):
            return "\n".join([line[len("ERROR: "):], *lines[index + 1:]]).strip()
    return ""


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# ---------------------------------------------------------------- the child's plugin

def _write(data: Mapping[str, Any]) -> None:
    target = os.environ.get(PROBE_ENV)
    if not target:
        return
    payload = {"format": _FORMAT, **data}
    Path(target).write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")


def _usage(exc: BaseException) -> None:
    _write({"status": "usage-error", "message": str(exc)})


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # A usage error raised by the plugin's own pytest_configure never reaches here
    # (historic hooks take no wrappers): the parent reads it from pytest's stderr.
    if not (os.environ.get(PROBE_ENV) or os.environ.get(REQUIRE_ENV) == "1"):
        return
    if config.getoption("help", False) or config.pluginmanager.get_plugin(_SESSION):
        return
    if os.environ.get(PROBE_ENV):
        _write({"status": "no-paths", "message": NO_PATHS_MESSAGE})
    raise pytest.UsageError(NO_PATHS_MESSAGE)


@pytest.hookimpl(wrapper=True)
def pytest_collection_finish(session: pytest.Session) -> Generator[None, None, None]:
    try:
        yield
    except pytest.UsageError as exc:  # a path outside the repository, every task held out, ...
        _usage(exc)
        raise


_ERRORS: list[dict[str, str]] = []


class _Controller(Protocol):
    """What the probe reads of the controller plugin (``EvolveSession``) once collection is done.

    A protocol rather than the class, so the probe does not depend on how the
    session is built; ``plan`` is None when the plugin refused before collecting.
    """

    plan: EvolvePlan | None
    settings: EvolveSettings


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed and os.environ.get(PROBE_ENV):
        _ERRORS.append({"nodeid": report.nodeid, "message": report.longreprtext})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if not os.environ.get(PROBE_ENV):
        return
    if _ERRORS:
        _write({"status": "collection-error", "errors": list(_ERRORS)})
        return
    controller: _Controller | None = session.config.pluginmanager.get_plugin(_SESSION)
    plan = None if controller is None else controller.plan
    if controller is None or plan is None:
        return  # a usage error was written where it was raised
    _write({"status": "ok", "plan": _plan_json(plan, session.config, controller.settings)})


def _plan_json(plan: EvolvePlan, config: pytest.Config,
               settings: EvolveSettings) -> dict[str, Any]:
    from pytest_agentdescent.proposer import hook_implementations

    values = dataclasses.asdict(settings)
    inipath = config.inipath
    return {
        "root": str(plan.layout.root),
        "subdir": plan.layout.subdir,
        "roots": list(plan.roots),
        "tasks": [{"nodeid": t.nodeid, "weight": t.weight, "holdout": t.holdout,
                   "explicit": t.explicit} for t in plan.tasks],
        "guards": list(plan.guards),
        "test_files": list(plan.test_files),
        "frozen_patterns": list(plan.frozen.patterns),
        "frozen_files": sorted(plan.frozen.frozen_files),
        "holdout_fraction": plan.holdout_fraction,
        "notes": list(plan.notes),
        "unmarked": plan.unmarked,
        "inipath": str(inipath) if inipath is not None else None,
        "python_files": [str(p) for p in config.getini("python_files") or ()],
        "settings": values,
        "sources": dict(plan.sources),
        "proposers": hook_implementations(config),
    }
