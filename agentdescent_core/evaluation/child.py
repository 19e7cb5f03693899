"""The child run: the candidate's tests in a ``python -m pytest`` inside a sandbox.

:func:`run_tests` starts the child pytest in a workspace through a backend,
with the recorder plugin (``pytest_agentdescent.recorder``) journaling one line
per test, and turns the journal into :class:`TestRecord` objects.

A child process runs each test **at most once**.  A test that cannot run
twice in one process (a generator given to ``parametrize`` is used up by its
first run; a module-level list the test appends to) would otherwise score one
run right and every later repeat wrong.  So repeats are *sweeps*
(:func:`sweeps`): one plan per repeat index holding every test that needs
that repeat, each run by its own child (:func:`run_tests` refuses a plan
with more than one repeat of a test).  The caller resets the workspace
between sweeps, so every repeat starts from what a fresh checkout gives.
Whatever happens to the child, every planned (test, repeat) comes back with a
record or the whole candidate comes back with an error:

* a per-test timeout: the recorder wrote the ``timeout`` record and killed its
  process group; the tests that did not run go to a fresh child (bounded);
* a crash (a segfault, the memory limit, ``os._exit`` in a test): the test that
  was running gets a ``crash`` record with the exit status and the end of the
  child's output; the rest go to a fresh child (bounded);
* the whole-run timeout: the running test and the ones that never ran get
  ``timeout`` records;
* a collection error, or a child that exits before running any test: the
  candidate fails as a whole, with pytest's message (:attr:`ChildOutcome.error`).

The child keeps the user's plugins and ini (autoload stays on, and the ``-p``
options of the user's own command line are passed on); only pytest's
cache directory moves to the worker's state directory, ``--maxfail`` is reset
so an ``-x`` in ``addopts`` cannot stop the evaluation early, ``-n 0`` turns
off an ``-n`` of pytest-xdist in ``addopts`` (the recorder journals from the
process that runs the tests, and parallelism is ``eval_concurrency``'s job),
and the test *files* are passed rather than node ids (a node id that no longer exists would
abort the whole session; the recorder selects the planned tests itself).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import secrets
import signal
import site
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentdescent_core.evaluation.journal import (
    CHILD_ENV,
    PLAN_ENV,
    RECORD_ENV,
    ChildPlan,
    read_journal,
)
from agentdescent_core.evaluation.records import DEFAULT_OUTPUT_CHARS, TestRecord
from agentdescent_core.sandbox.env import DEFAULT_ENV_ALLOWLIST, child_environment
from agentdescent_core.sandbox.interpreter import interpreter_paths, package_root
from agentdescent_core.sandbox.snapshot import remove_tree
from agentdescent_core.sandbox.spec import (
    Backend,
    Limits,
    Network,
    RunResult,
    RunSpec,
    WorkspaceWrites,
)

#: Node id -> (first repeat index, number of repeats).  :func:`run_tests` takes
#: plans whose counts are all 1 (one run per test per child); :func:`sweeps`
#: cuts any set of (test, repeat) pairs into such plans.
Spans = Mapping[str, tuple[int, int]]

_TAIL_CHARS = 2000
#: pytest's own exit codes for a session that ran to its end (tests failed or not).
_NORMAL_EXITS = (0, 1, 5)

# The recorder's module (the other side of evaluation/journal.py); named here so
# this module does not import pytest.
_RECORDER_PLUGIN = "pytest_agentdescent.recorder"


@dataclass(frozen=True)
class ChildConfig:
    """How every child of one verifier runs: sandbox, environment, limits, pytest arguments.

    ``host_env`` is filtered through ``env_allow`` (None: this process's
    environment at run time).  ``readable`` None means the interpreter's paths
    (:func:`interpreter_paths`).  ``hidden`` are host paths the child must not
    see (the user's repository).  ``test_timeout`` None disables the per-test
    watchdog; ``run_timeout`` bounds one evaluation: a :func:`run_tests`
    call, restarts included, or all the sweeps of one evaluation when the
    caller passes them one ``deadline``; ``max_restarts`` bounds the fresh
    children started after a per-test timeout or a crash.
    """

    backend: Backend
    env_allow: Sequence[str] = DEFAULT_ENV_ALLOWLIST
    host_env: Mapping[str, str] | None = None
    hidden: Sequence[Path] = ()
    readable: Sequence[Path] | None = None
    network: Network = "default"
    limits: Limits = field(default_factory=Limits)
    test_timeout: float | None = 60.0
    run_timeout: float = 900.0
    output_chars: int = DEFAULT_OUTPUT_CHARS
    pytest_args: Sequence[str] = ()
    max_restarts: int = 8
    #: Record what each test reads under the artifact roots (``TestRecord.reads``).
    #: Not part of :meth:`fingerprint`: tracing does not change a result.
    trace_reads: bool = False

    def __post_init__(self) -> None:
        if self.test_timeout is not None and self.test_timeout <= 0:
            raise ValueError(f"test_timeout must be positive or None, got {self.test_timeout!r}")
        if self.run_timeout <= 0:
            raise ValueError(f"run_timeout must be positive, got {self.run_timeout!r}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts!r}")
        if isinstance(self.pytest_args, str):
            raise TypeError(
                f"pytest_args must be a sequence of arguments, not the string {self.pytest_args!r}"
            )

    def fingerprint(self) -> str:
        """A hash of every setting that can change a test's result (part of the cache key)."""
        data = {
            "backend": self.backend.name,
            "image": str(getattr(self.backend, "image_name", "") or ""),
            "network": self.network,
            "limits": [self.limits.memory_mb, self.limits.cpu_seconds,
                       self.limits.max_processes, self.limits.max_file_mb],
            "test_timeout": self.test_timeout,
            "pytest_args": list(self.pytest_args),
            "env_allow": sorted(self.env_allow),
            "python": sys.version,
            # Records from before repeats became sweeps ran later repeats in the
            # process of the first, and may be wrong: they must not be reused.
            "repeats": "one run per test per process",
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ChildOutcome:
    """Records of every planned (test, repeat), or an error that fails the candidate.

    ``not_run`` are the keys whose records were made up by the parent because
    the test never ran (out of time, out of restarts): they are failures for
    this evaluation but not measurements worth caching.  ``runs`` counts the
    children started.  A non-empty ``tamper`` makes the whole candidate
    ``tamper`` (the verifier's verdict), whatever its records say.
    """

    records: tuple[TestRecord, ...]
    error: str | None
    runs: int = 0
    not_run: frozenset[tuple[str, int]] = frozenset()
    #: What the recorder saw candidate code do to the test process (signed
    #: ``tamper`` lines: "skills/x/helper.py: called sys._getframe() (in test)").
    tamper: tuple[str, ...] = ()


@functools.cache
def _xdist_installed() -> bool:
    """Is pytest-xdist importable?  The child runs this same interpreter, so the
    answer holds there; asked once per process, not once per child run."""
    return importlib.util.find_spec("xdist") is not None


def child_argv(test_files: Sequence[str], *, state_dir: Path,
               pytest_args: Sequence[str] = ()) -> list[str]:
    """The child's command line (see the module docstring for each choice)."""
    # Later options win over addopts; -n exists only where xdist is installed and loaded.
    xdist_off = any(arg in ("no:xdist", "-pno:xdist") for arg in pytest_args)
    no_xdist = ["-n", "0"] if _xdist_installed() and not xdist_off else []
    return [
        sys.executable, "-m", "pytest",
        "-p", _RECORDER_PLUGIN,
        "-q", "--no-header", "-rN",
        "--maxfail=0",
        *no_xdist,
        "-o", f"cache_dir={state_dir / 'pytest-cache'}",
        *pytest_args,
        *test_files,
    ]


def split_plan(plan: Spans, chunks: int) -> list[dict[str, tuple[int, int]]]:
    """``plan`` cut into at most ``chunks`` parts of similar cost, to run at once.

    Tests of one file stay together when there are enough files (module-scoped
    fixtures are then built once per file, not once per chunk).
    """
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    groups: dict[str, dict[str, tuple[int, int]]] = {}
    for nodeid, span in plan.items():
        groups.setdefault(_file_of(nodeid), {})[nodeid] = span
    units = list(groups.values()) if len(groups) >= chunks else [
        {nodeid: span} for nodeid, span in plan.items()
    ]
    units.sort(key=lambda unit: -sum(count for _, count in unit.values()))
    parts: list[dict[str, tuple[int, int]]] = [{} for _ in range(min(chunks, len(units)))]
    loads = [0] * len(parts)
    for unit in units:
        target = loads.index(min(loads))
        parts[target].update(unit)
        loads[target] += sum(count for _, count in unit.values())
    return [part for part in parts if part]


def sweeps(keys: Iterable[tuple[str, int]]) -> list[dict[str, tuple[int, int]]]:
    """``keys`` ((test, repeat) pairs) as one plan per repeat index, in repeat order.

    Each plan holds every test that needs that repeat, once: the unit one
    child process runs (so a sweep costs one child start, not one per test).
    """
    by_repeat: dict[int, dict[str, tuple[int, int]]] = {}
    for nodeid, repeat in sorted(set(keys), key=lambda key: (key[1], key[0])):
        by_repeat.setdefault(repeat, {})[nodeid] = (repeat, 1)
    return [by_repeat[repeat] for repeat in sorted(by_repeat)]


def run_tests(
    workspace_root: Path,
    plan: Spans,
    config: ChildConfig,
    *,
    scratch: Path,
    state_dir: Path,
    writable: Sequence[Path] = (),
    redact: Callable[[str], str] = str,
    workspace_writes: WorkspaceWrites | None = None,
    deadline: float | None = None,
) -> ChildOutcome:
    """Run the planned tests in ``workspace_root``, each once; see the module docstring.

    Every count in ``plan`` must be 1 (a ValueError names the test otherwise):
    a second run of a test in the same process is not what a plain pytest run
    measures.  ``deadline`` (``time.monotonic()`` seconds) is when the call
    must end, restarts included; None means ``config.run_timeout`` from now.
    A caller running several sweeps of one evaluation passes one deadline to
    all of them, so the whole-run timeout bounds the evaluation, not each sweep.

    Every text that comes back (records, errors, tamper lines) passes through
    ``redact`` (a :class:`~agentdescent_core.redact.Redactor`: secrets masked)
    after the workspace's location is cut to repository-relative paths.

    ``scratch`` is a fresh per-run directory (HOME, TMPDIR, the journal and the
    plan file of each child live in it); ``state_dir`` is the worker's
    directory that outlives runs (pytest's cache under ``pytest-cache``);
    ``writable`` are the artifact paths; ``workspace_writes`` lets the tests
    write into the rest of the copy (see :class:`RunSpec`).  The child writes no bytecode: a
    bytecode cache it could write is one a candidate could plant a forged
    ``.pyc`` in for the next child to load (see ``sandbox/reset.py``).  Raises
    BackendError only when the sandbox itself cannot be set up.
    """
    several = sorted(nodeid for nodeid, (_first, count) in plan.items() if count != 1)
    if several:
        raise ValueError(
            f"run_tests runs each test once per child, but the plan asks for "
            f"{plan[several[0]][1]} runs of {several[0]!r}"
            f"{f' (and of {len(several) - 1} more tests)' if len(several) > 1 else ''}; "
            "cut it into one plan per repeat with sweeps()"
        )
    wanted = {(nodeid, first) for nodeid, (first, _count) in plan.items()}
    records: dict[tuple[str, int], TestRecord] = {}
    not_run: set[tuple[str, int]] = set()
    if deadline is None:
        deadline = time.monotonic() + config.run_timeout
    pending: dict[str, tuple[int, int]] = dict(plan)
    runs = 0
    restarts = 0
    tamper: list[str] = []
    space = os.path.commonpath([str(workspace_root.absolute()),
                                *(str(p.absolute()) for p in writable)])

    def clean(text: str) -> str:
        return redact(_unplaced(text, space))

    (state_dir / "pytest-cache").mkdir(parents=True, exist_ok=True)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0.5:
            _fill(records, not_run, wanted, "timeout",
                  f"not run: the whole-run timeout ({config.run_timeout:g}s) was used up")
            break
        runs += 1
        run_dir = scratch / f"child-{runs}"
        run_dir.mkdir(parents=True, exist_ok=True)
        journal = run_dir / "records.jsonl"
        plan_file = run_dir / "plan.json"
        key = secrets.token_hex(32)  # signs this child's journal lines, once
        plan_file.write_text(ChildPlan(
            tests=dict(pending), test_timeout=config.test_timeout,
            output_chars=config.output_chars, key=key,
            artifact_roots=tuple(str(p.absolute()) for p in writable), workspace=space,
            trace_reads=config.trace_reads,
        ).to_json(), encoding="utf-8")
        env = child_environment(
            os.environ if config.host_env is None else config.host_env,
            config.env_allow,
            scratch=run_dir,
            extra={
                RECORD_ENV: str(journal),
                PLAN_ENV: str(plan_file),
                CHILD_ENV: "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )
        _add_import_path(env)
        spec = RunSpec(
            argv=child_argv(sorted({_file_of(n) for n in pending}), state_dir=state_dir,
                            pytest_args=config.pytest_args),
            workspace=workspace_root,
            scratch=run_dir,
            env=env,
            timeout=left,
            writable=tuple(writable),
            extra_writable=(state_dir / "pytest-cache",),
            readable=tuple(interpreter_paths() if config.readable is None else config.readable),
            hidden=tuple(config.hidden),
            network=config.network,
            limits=config.limits,
            workspace_writes=workspace_writes,
        )
        result = config.backend.run(spec)
        lines = read_journal(journal, key.encode())
        tamper.extend(t for t in _tamper_of(lines) if t not in tamper)
        collect_errors = [str(d["collect_error"]) for d in lines if "collect_error" in d]
        if collect_errors:
            return _outcome({}, "\n\n".join(collect_errors), runs, set(), tamper, clean)
        new = _parse_records(lines, wanted)
        started = _unfinished(lines, new)
        records.update(new)
        missing = wanted - records.keys()
        if not missing:
            break
        if not lines and not new:
            return _outcome(records, _start_failure(result), runs, set(), tamper, clean)
        if result.killed == "timeout":
            if started is not None and started in missing:
                records[started] = _made_up(
                    started, "timeout",
                    f"the whole-run timeout ({config.run_timeout:g}s) ran out while this test ran",
                )
            _fill(records, not_run, wanted, "timeout",
                  f"not run: the whole-run timeout ({config.run_timeout:g}s) ran out")
            break
        if started is not None and started in missing:  # no record: the child died in it
            records[started] = _made_up(started, "crash", _crash_reason(result))
        missing = wanted - records.keys()
        if not missing:
            break
        cut_short = result.returncode not in _NORMAL_EXITS
        if not cut_short or not (new or started) or restarts >= config.max_restarts:
            why = (f"the child pytest finished ({_status(result)}) without running it"
                   if not cut_short else
                   f"the child pytest stopped early {restarts + 1} times ({_status(result)})")
            _fill(records, not_run, wanted, "crash", f"not run: {why}")
            break
        restarts += 1
        # The dead child's tests may have planted bytecode for a frozen module
        # (writable under local); the next child must import the real source.
        _drop_bytecode(workspace_root)
        pending = spans(missing)
    return _outcome(records, None, runs, not_run, tamper, clean)


# ---------------------------------------------------------------- helpers

def _drop_bytecode(root: Path) -> None:
    """Remove every ``__pycache__`` under ``root`` (symlinks are not followed)."""
    for folder, dirs, _files in os.walk(root):
        for name in [d for d in dirs if d == "__pycache__"]:
            remove_tree(os.path.join(folder, name))
            dirs.remove(name)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _add_import_path(env: dict[str, str]) -> None:
    """Put this package on the child's PYTHONPATH when site-packages does not hold it.

    The child must import the same agentdescent as the parent (the recorder
    and the engine's reward rule); from a source checkout or a ``PYTHONPATH``
    setup the scrubbed environment would otherwise lose it.  An allowlisted
    PYTHONPATH of the user's is kept, after ours.
    """
    site_dirs = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages())}
    roots: list[str] = []
    for name in ("pytest_agentdescent", "agentdescent_core"):
        root = package_root(name)
        if root is not None and root not in site_dirs and str(root) not in roots:
            roots.append(str(root))
    if roots:
        env["PYTHONPATH"] = os.pathsep.join(
            [*roots, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])


def _unplaced(text: str, space: str) -> str:
    """``text`` with the workspace's absolute location cut to repository-relative paths.

    Workspaces live in fresh temporary directories, so a message that names
    ``/tmp/agentdescent-ws-x1y2/skills/a.md`` would differ between runs of the
    same test, and so would every prompt built from it (a recorded model
    answer could never be replayed); ``skills/a.md`` is also what a proposer
    can act on.
    """
    return text.replace(space + os.sep, "").replace(space, ".") if space in text else text


def _outcome(records: Mapping[tuple[str, int], TestRecord], error: str | None, runs: int,
             not_run: set[tuple[str, int]], tamper: Sequence[str],
             clean: Callable[[str], str]) -> ChildOutcome:
    """The outcome of :func:`run_tests`, every text in it cleaned once, records in order."""
    ordered = tuple(_cleaned(records[key], clean) for key in sorted(records))
    return ChildOutcome(ordered, None if error is None else clean(error), runs,
                        frozenset(not_run & set(records)),
                        tuple(dict.fromkeys(clean(t) for t in tamper)))


def _cleaned(record: TestRecord, clean: Callable[[str], str]) -> TestRecord:
    message, output = clean(record.message), clean(record.output)
    if message == record.message and output == record.output:
        return record
    return dataclasses.replace(record, message=message, output=output)


def _tamper_of(lines: Sequence[Mapping[str, Any]]) -> list[str]:
    """The recorder's signed ``tamper`` lines, each as "file: what (while test ran)"."""
    found: list[str] = []
    for data in lines:
        if "tamper" not in data:
            continue
        file = str(data.get("file") or "the candidate's code")
        nodeid = str(data.get("nodeid") or "")
        when = f" while {nodeid} ran" if nodeid else ""
        found.append(f"{file}: {data['tamper']}{when}")
    return found


def _parse_records(
    lines: Sequence[Mapping[str, Any]], wanted: set[tuple[str, int]]
) -> dict[tuple[str, int], TestRecord]:
    found: dict[tuple[str, int], TestRecord] = {}
    for data in lines:
        if "outcome" not in data:
            continue
        try:
            record = TestRecord.from_mapping(data)
        except (KeyError, TypeError, ValueError):
            continue
        key = (record.nodeid, record.repeat)
        if key in wanted and key not in found:
            found[key] = record
    return found


def _unfinished(
    lines: Sequence[Mapping[str, Any]], done: Mapping[tuple[str, int], TestRecord]
) -> tuple[str, int] | None:
    """The (test, repeat) that had started but has no record: what was running at the end."""
    for data in reversed(lines):
        if "start" in data:
            key = (str(data["start"]), int(data.get("repeat", 0)))
            return None if key in done else key
    return None


def _made_up(key: tuple[str, int], phase: str, message: str) -> TestRecord:
    return TestRecord(nodeid=key[0], outcome="failed", reward=0.0, repeat=key[1],
                      message=message, phase=phase)


def _fill(records: dict[tuple[str, int], TestRecord], not_run: set[tuple[str, int]],
          wanted: set[tuple[str, int]], phase: str, message: str) -> None:
    for key in sorted(wanted - records.keys()):
        records[key] = _made_up(key, phase, message)
        not_run.add(key)


def spans(keys: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """The plan that covers ``keys`` ((test, repeat) pairs): each test's first repeat and count."""
    by_test: dict[str, list[int]] = {}
    for nodeid, repeat in keys:
        by_test.setdefault(nodeid, []).append(repeat)
    return {nodeid: (min(reps), max(reps) - min(reps) + 1) for nodeid, reps in by_test.items()}


def _status(result: RunResult) -> str:
    if result.killed is not None:
        return f"killed by the sandbox ({result.killed} limit)"
    code = result.returncode
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _tail(result: RunResult) -> str:
    text = "\n".join(part.strip() for part in (result.stdout, result.stderr) if part.strip())
    return text[-_TAIL_CHARS:]


def _crash_reason(result: RunResult) -> str:
    tail = _tail(result)
    reason = f"the child pytest died while this test ran ({_status(result)})"
    return f"{reason}; its last output:\n{tail}" if tail else reason


def _start_failure(result: RunResult) -> str:
    tail = _tail(result) or "(no output)"
    return (f"the child pytest stopped before running any test ({_status(result)}); "
            f"fix what it reports (a conftest or plugin that fails to import, a bad ini "
            f"option):\n{tail}")
