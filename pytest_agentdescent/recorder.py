"""The recorder plugin loaded into the child pytest that evaluates a candidate.

The parent (``agentdescent_core.evaluation.child``) starts
``python -m pytest -p pytest_agentdescent.recorder <test files>`` in a workspace
with two environment variables: :data:`RECORD_ENV`, the JSON-lines file this
plugin appends to, and :data:`PLAN_ENV`, a JSON file saying which tests to run,
which repeat indices, the per-test timeout and how much output to keep.  Without
:data:`RECORD_ENV` the plugin does nothing, so loading it by accident is harmless.

What the file holds, one JSON object per line, flushed as it happens:

* ``{"start": nodeid, "repeat": r}`` before each run of a test, so after a crash
  the parent knows which test was running;
* a record per test per repeat with exactly the fields of
  :class:`~agentdescent_core.evaluation.records.TestRecord`, phases combined
  (a setup error is outcome ``error`` phase ``setup``; a teardown error after
  a pass is ``error`` phase ``teardown``);
* ``{"collect_error": message}`` when a file cannot be collected — the parent
  then fails the whole candidate with that message.

With the plan's ``trace_reads`` each record's ``reads`` lists what the test
read under the artifact roots (:mod:`pytest_agentdescent.readtrace`, started
here at import like the audit hook); otherwise it is None.

The parent asks for one run of each test per child (repeats are sweeps, each
its own child process: a test that cannot run twice in one process, such as one
consuming a generator parameter, then scores as under plain pytest).  A plan
with several runs of one test is still carried out, by running pytest's own
test protocol on the same item again (the way re-run plugins do), but the
parent refuses to send one.  A watchdog thread enforces the per-test timeout: it writes the
``timeout`` record itself, then kills the whole process group, because a hung
test cannot be interrupted from inside; the parent restarts a child for the
tests that did not run.

Candidate code runs inside this child, so the journal is authenticated: the
parent puts a fresh key in the plan; the recorder reads it, deletes the plan
file and removes both variables from ``os.environ`` before any test runs, and
signs every line (HMAC-SHA256 in its ``mac`` field).  A script that appends a
forged "passed" line to the journal cannot sign it, and the parent drops it.

The recorder is also tamper-evident (:mod:`pytest_agentdescent.tamper`).  At
import — before any conftest or test module — it reads the plan, opens the
journal, pins its own functions (and pytest's ``runtestprotocol`` and
``call_and_report``) to private copies of their globals, so that replacing
``recorder.combine_reports`` or ``json.dumps`` changes nothing it calls, and
installs an audit hook.  After every phase it checks that no attribute of its
modules, or of pytest's runner, reports, nodes and python modules and their
key classes, was replaced; after each test it looks for library attributes
that now hold code from the artifact roots.  Each finding is a signed
``{"tamper": what, "file": where, "nodeid": ...}`` line; the parent makes the
whole candidate ``tamper``.

From ``agentdescent_core`` the module imports only the standard-library
:mod:`~agentdescent_core.evaluation.journal` (the plan, the signing, the
environment names: the protocol both sides share) and
:mod:`~agentdescent_core.evaluation.records`: the engine's heavier parts would
add up to half a second to every child start.  The parent validates each line
with ``TestRecord.from_mapping``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FunctionType, ModuleType
from typing import IO, Any, cast

import _pytest.nodes
import _pytest.python
import _pytest.reports
import _pytest.runner
import pytest
from _pytest.runner import runtestprotocol

from agentdescent_core.evaluation import journal as _journal, records as _records
from agentdescent_core.evaluation.journal import PLAN_ENV, RECORD_ENV, ChildPlan, sign_line
from agentdescent_core.evaluation.records import DEFAULT_OUTPUT_CHARS
from pytest_agentdescent import readtrace as _readtrace, reward as _reward
from pytest_agentdescent.readtrace import ReadTracer
from pytest_agentdescent.reward import clear_reward, recorded_reward
from pytest_agentdescent.tamper import Integrity, Planted, Watch

# What the recorder calls, bound once: a test that patches ``time.monotonic`` or
# ``threading.Thread`` does not change how the watchdog works (the journal's own
# module binds ``json.dumps`` and ``hmac.new`` the same way).
_monotonic = time.monotonic
_Thread = threading.Thread
_Condition = threading.Condition
_RLock = threading.RLock


#: Exit status of a child whose watchdog fired but survived its own group kill
#: (a PID-1 process in a container ignores SIGKILL from inside).
TIMEOUT_EXIT_CODE = 124


def truncate(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start and (mostly) its end.

    The end of a traceback or of captured output is where the answer usually
    is, so three quarters of the budget go to the tail.
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 4
    tail = max(0, limit - head)
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail:]}"


# ---------------------------------------------------------------- report -> record

def _failure_text(report: pytest.TestReport) -> str:
    """The crash line first, then pytest's full representation (rewritten assertion)."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = report.longreprtext.rstrip()
    head = str(getattr(crash, "message", "") or "").strip()
    if head and not text.startswith(head):
        return f"{head}\n\n{text}"
    return text or head


def _skip_text(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        reason = str(report.wasxfail)
        return f"xfail: {reason}" if reason else "xfail"
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 \
        else report.longreprtext.strip()
    return text.removeprefix("Skipped: ")


def _captured(reports: Sequence[pytest.TestReport]) -> str:
    # The last report carries every section of the run (setup, call, teardown).
    sections = reports[-1].sections if reports else []
    parts = [f"----- {title} -----\n{content.rstrip()}" for title, content in sections
             if content.strip()]
    return "\n".join(parts)


def combine_reports(
    nodeid: str,
    repeat: int,
    reports: Sequence[pytest.TestReport],
    *,
    reward: float | None = None,
    output_chars: int = DEFAULT_OUTPUT_CHARS,
    reads: Sequence[str] | None = None,
) -> dict[str, Any]:
    """One record (``TestRecord``'s fields) from the reports of one run of a test.

    ``reward`` is what the test recorded through ``evolve_reward``: it is the
    reward of a passed, xpassed or failed test (a graded test may record a
    score and then fail an assertion; the score is the measurement).  Errors
    earn 0.0; skipped and xfailed tests earn nothing (None).
    """
    by_phase = {r.when: r for r in reports}
    setup, call, teardown = by_phase.get("setup"), by_phase.get("call"), by_phase.get("teardown")
    phase = "call"
    message = ""
    if setup is not None and setup.failed:
        outcome, phase, message = "error", "setup", _failure_text(setup)
    elif setup is not None and setup.skipped:
        outcome, phase = ("xfailed" if hasattr(setup, "wasxfail") else "skipped"), "setup"
        message = _skip_text(setup)
    elif call is None:
        outcome, message = "skipped", "the test body did not run (--setup-only?)"
    elif call.failed:
        outcome, message = "failed", _failure_text(call)
    elif call.skipped:
        outcome = "xfailed" if hasattr(call, "wasxfail") else "skipped"
        message = _skip_text(call)
    else:
        outcome = "xpassed" if hasattr(call, "wasxfail") else "passed"
    if teardown is not None and teardown.failed:
        if outcome == "failed" or outcome == "error":
            message = f"{message}\n\nand then in teardown:\n{_failure_text(teardown)}"
        else:
            outcome, phase, message = "error", "teardown", _failure_text(teardown)

    value: float | None
    if outcome in ("passed", "xpassed"):
        value = 1.0 if reward is None else reward
    elif outcome == "failed":
        value = 0.0 if reward is None else reward
    elif outcome == "error":
        value = 0.0
    else:
        value = None
    return record(nodeid, outcome, value, repeat=repeat, phase=phase,
                  message=truncate(message, output_chars),
                  output=truncate(_captured(reports), output_chars),
                  duration=sum(r.duration for r in reports), reads=reads)


def record(
    nodeid: str,
    outcome: str,
    reward: float | None,
    *,
    repeat: int,
    phase: str,
    message: str = "",
    output: str = "",
    duration: float = 0.0,
    reads: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A record line: the fields of ``TestRecord``, which the parent parses it into."""
    return {"nodeid": nodeid, "outcome": outcome, "reward": reward, "repeat": repeat,
            "message": message, "output": output, "duration": duration, "phase": phase,
            "reads": None if reads is None else sorted(reads)}


# ---------------------------------------------------------------- the plugin

class _KeepParents:
    """Stands in for ``nextitem`` between repeats of one item.

    pytest tears down every node that the next item does not share; claiming
    the next item is "a sibling of this one" tears down exactly the test's own
    node (its function-scoped fixtures) and keeps the class, module and
    session ones.  Everything else is the item's.
    """

    def __init__(self, item: pytest.Item) -> None:
        self._item = item

    def listchain(self) -> list[Any]:
        return self._item.listchain()[:-1]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._item, name)


class _Watchdog(_Thread):
    """The watchdog thread; it drops its target at start, so ``threading.enumerate()``
    does not lead to the journal (and its key) through ``Thread._target``."""

    def run(self) -> None:
        target = getattr(self, "_target", None)
        self._target = None
        if target is not None:
            target()


class _Journal:
    """The record file and the per-test watchdog, sharing one lock.

    Every line is written under the lock, so the watchdog's timeout record and
    the main thread's own record for the same run can never both appear.  The
    lock is reentrant: the audit hook may report a finding from inside a write.
    """

    def __init__(self, path: Path, timeout: float | None, key: str = "") -> None:
        self._out: IO[str] = path.open("a", encoding="utf-8")
        self._key = key.encode()
        self._timeout = timeout
        self._cond = _Condition(_RLock())
        self._current: tuple[str, int] | None = None
        self._deadline = 0.0
        self._started = 0.0
        self._closed = False
        if timeout is not None:
            _Watchdog(target=self._watch, name="agentdescent-watchdog", daemon=True).start()

    def write(self, data: Mapping[str, Any]) -> None:
        with self._cond:
            self._write(data)

    def _write(self, data: Mapping[str, Any]) -> None:
        if self._closed:
            return
        self._out.write(sign_line(data, self._key) + "\n")
        self._out.flush()

    def tamper(self, what: str, file: str) -> None:
        """A signed ``tamper`` line: ``file`` did ``what`` (while the current test ran)."""
        with self._cond:
            nodeid = self._current[0] if self._current is not None else ""
            self._write({"tamper": what, "file": file, "nodeid": nodeid})

    def start(self, nodeid: str, repeat: int) -> None:
        with self._cond:
            self._write({"start": nodeid, "repeat": repeat})
            self._current = (nodeid, repeat)
            self._started = _monotonic()
            if self._timeout is not None:
                self._deadline = self._started + self._timeout
            self._cond.notify_all()

    def finish(self, line: Mapping[str, Any]) -> None:
        with self._cond:
            self._current = None
            self._write(line)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._current = None
            self._out.close()
            self._cond.notify_all()

    def _watch(self) -> None:
        assert self._timeout is not None
        with self._cond:
            while not self._closed:
                if self._current is None:
                    self._cond.wait()
                    continue
                left = self._deadline - _monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                nodeid, repeat = self._current
                self._write(record(
                    nodeid, "failed", 0.0, repeat=repeat,
                    message=f"timed out after {self._timeout:g}s (the per-test timeout); "
                            "the test and every process it started were killed",
                    duration=_monotonic() - self._started, phase="timeout",
                ))
                _kill_everything()


def _kill_everything() -> None:
    """Kill this process group (the test's subprocesses too), then this process."""
    try:
        if os.getpgrp() == os.getpid():  # only a group we lead: never the caller's shell
            os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(TIMEOUT_EXIT_CODE)


class _Guard:
    """The tamper checks the recorder runs at report time (see :mod:`.tamper`)."""

    def __init__(self, journal: _Journal, watch: Watch, integrity: Integrity,
                 planted: Planted) -> None:
        self._journal = journal
        self._watch = watch
        self._integrity = integrity
        self._planted = planted
        self._seen: set[tuple[str, str]] = set()

    def check(self, *, full: bool = False) -> None:
        """Journal a ``tamper`` line for every replaced attribute (and planted code if ``full``)."""
        with self._watch.quiet():
            found = self._integrity.changed()
            if full:
                found += self._planted.scan()
        for what, file in found:
            if (what, file) not in self._seen:
                self._seen.add((what, file))
                self._journal.tamper(what, self._watch.relative(file) if file else "")


class Recorder:
    """Runs the planned tests and journals one record per test per repeat."""

    def __init__(self, journal: _Journal, plan: ChildPlan, guard: _Guard,
                 tracer: ReadTracer) -> None:
        self._journal = journal
        self._plan = plan
        self._guard = guard
        self._tracer = tracer

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            where = report.nodeid or "."
            text = truncate(report.longreprtext.strip(), self._plan.output_chars)
            self._journal.write({"collect_error": f"collecting {where} failed:\n{text}"})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        self._guard.check(full=True)  # what the test modules' imports did
        if not self._plan.tests:
            return
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        seen: set[str] = set()
        for item in items:
            if item.nodeid in self._plan.tests and item.nodeid not in seen:
                seen.add(item.nodeid)
                keep.append(item)
            else:
                dropped.append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        for nodeid, (first, count) in self._plan.tests.items():
            if nodeid in seen:
                continue
            for repeat in range(first, first + count):
                self._journal.write(record(
                    nodeid, "error", 0.0, repeat=repeat, phase="collect",
                    message=f"{nodeid} was not collected in the candidate's workspace "
                            "(renamed, deselected, or its parametrization changed)",
                ))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        first, count = self._plan.span(item.nodeid)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for repeat in range(first, first + count):
            last = repeat == first + count - 1
            if item.session.shouldstop or item.session.shouldfail:
                break
            clear_reward(item)
            item._report_sections = []  # captured output of the previous repeat
            self._tracer.begin()
            self._journal.start(item.nodeid, repeat)
            following = nextitem if last else cast(pytest.Item, _KeepParents(item))
            reports = runtestprotocol(item, log=True, nextitem=following)
            line = combine_reports(
                item.nodeid, repeat, reports,
                reward=recorded_reward(item), output_chars=self._plan.output_chars,
                reads=self._tracer.end(node.nodeid for node in item.listchain()),
            )
            self._guard.check(full=last)
            self._journal.finish(line)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Iterator[None]:
        """Reads while a broader fixture is set up belong to every test that shares it."""
        shared = self._tracer.enabled and fixturedef.scope != "function"
        if shared:
            self._tracer.enter(_sharing(fixturedef.scope, request))
        try:
            yield
        finally:
            if shared:
                self._tracer.leave()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # After each phase, not only at the end: a patch made in setup and
        # undone in teardown must not go unseen.
        self._guard.check()

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._guard.check(full=True)
        self._journal.close()


def _sharing(scope: str, request: Any) -> str:
    """The node id whose tests share a fixture of ``scope`` ("": every test of the child).

    Module and class scope: that module's or class's tests; package and session
    scope, or a node pytest cannot name (a class fixture outside a class): all.
    """
    try:
        node = request.node if scope in ("module", "class") else None
    except Exception:  # pytest asserts there is such a node; never fail a fixture over it
        node = None
    return "" if node is None or isinstance(node, pytest.Item) else str(node.nodeid)


def _ensure_plugin(config: pytest.Config) -> None:
    """Register the agentdescent plugin (the ``evolve_reward`` fixture) when autoload is off."""
    from pytest_agentdescent import plugin

    manager = config.pluginmanager
    if not manager.is_registered(plugin):
        manager.register(plugin, "pytest_agentdescent.plugin")


# ---------------------------------------------------------------- start-up

def _rebind(function: FunctionType, namespace: dict[str, Any]) -> FunctionType:
    """``function`` with ``namespace`` as its globals (its markers and defaults kept)."""
    copy = FunctionType(function.__code__, namespace, function.__name__,
                        function.__defaults__, function.__closure__)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__ = function.__qualname__
    copy.__module__ = function.__module__
    return copy


def _pinned(namespace: Mapping[str, Any], module: str, classes: Iterable[str] = ()
            ) -> dict[str, Any]:
    """A private copy of a module's globals whose functions and classes use the copy.

    Replacing ``recorder.combine_reports`` (or ``_pytest.runner.call_and_report``)
    then changes the module, not what the recorder calls.
    """
    private = dict(namespace)
    for name, obj in list(private.items()):
        if isinstance(obj, FunctionType) and obj.__module__ == module:
            private[name] = _rebind(obj, private)
        elif name in classes and isinstance(obj, type):
            body = {key: _rebind(value, private) if isinstance(value, FunctionType) else value
                    for key, value in vars(obj).items() if key not in ("__dict__", "__weakref__")}
            private[name] = type(obj.__name__, obj.__bases__, body)
    return private


_PYTEST_CLASSES: tuple[type, ...] = (
    _pytest.python.Function, _pytest.python.PyobjMixin, _pytest.nodes.Item, _pytest.nodes.Node,
    _pytest.reports.TestReport, _pytest.reports.BaseReport, _pytest.runner.CallInfo,
    _pytest.runner.SetupState,
)


def _start() -> dict[str, Any] | str | None:
    """Read the plan, open the journal, install the audit hook: before any conftest loads.

    Returns what :func:`pytest_configure` registers, an error message, or None
    outside an evaluation (no :data:`RECORD_ENV`): a plain run that imports this
    module (the summary line uses :func:`combine_reports`) pins nothing.
    """
    path = os.environ.get(RECORD_ENV)
    if not path:
        return None
    private = _pin_all()
    plan_path = os.environ.get(PLAN_ENV)
    try:
        plan = (ChildPlan.from_json(Path(plan_path).read_text("utf-8")) if plan_path
                else ChildPlan())
    except (OSError, ValueError, TypeError) as exc:
        return (f"agentdescent recorder: cannot read the plan {plan_path!r} ({exc}); "
                f"{PLAN_ENV} must name a JSON file written by the evaluation layer")
    # Nothing the tests run may learn where the journal is or how lines are signed.
    for name in (RECORD_ENV, PLAN_ENV):
        os.environ.pop(name, None)
    if plan_path and plan.key:
        Path(plan_path).unlink(missing_ok=True)
    journal = private["_Journal"](Path(path), plan.test_timeout, plan.key)
    workspace = plan.workspace or os.getcwd()
    me = sys.modules[__name__]
    ours = [value for value in (*vars(me).values(), *private.values())
            if isinstance(value, (FunctionType, type)) and value.__module__ == __name__]
    tracer = private["ReadTracer"](plan.artifact_roots, workspace, enabled=plan.trace_reads)
    watch = Watch(plan.artifact_roots, workspace, journal.tamper,
                  protected=[*ours, private["ReadTracer"]])
    strict: list[ModuleType | type] = [me, _reward, _records, _journal, _readtrace,
                                       _readtrace.ReadTracer, private["ReadTracer"]]
    strict += [value for value in private.values()
               if isinstance(value, type) and value.__module__ == __name__]
    integrity = Integrity(strict, [_pytest.runner, _pytest.reports, _pytest.python,
                                   _pytest.nodes, *_PYTEST_CLASSES], workspace)
    with watch.quiet():
        planted = Planted(plan.artifact_roots, workspace)
        tracer.start()
    watch.install()
    guard = private["_Guard"](journal, watch, integrity, planted)
    return {"recorder": private["Recorder"](journal, plan, guard, tracer)}


def _pin_all() -> dict[str, Any]:
    runner = _pinned(vars(_pytest.runner), "_pytest.runner")
    journal = _pinned(vars(_journal), _journal.__name__)
    tracer = _pinned(vars(_readtrace), _readtrace.__name__, ("ReadTracer",))
    private = _pinned(globals(), __name__,
                      ("_KeepParents", "_Journal", "_Watchdog", "_Guard", "Recorder"))
    private["runtestprotocol"] = runner["runtestprotocol"]
    private["sign_line"] = journal["sign_line"]
    private["ReadTracer"] = tracer["ReadTracer"]
    return private


_pending: list[dict[str, Any] | str | None] = [_start()]


def pytest_configure(config: pytest.Config) -> None:
    # Taken out of the module at once: after this only pytest holds the recorder.
    started = _pending.pop() if _pending else None
    if started is None:
        return
    if isinstance(started, str):
        raise pytest.UsageError(started)
    _ensure_plugin(config)
    config.pluginmanager.register(started["recorder"], "agentdescent-recorder")
