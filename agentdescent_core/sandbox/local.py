"""The ``local`` backend, and the process supervision every host-side backend shares.

``local`` runs the command as a plain child of this process: its own session and
process group, resource limits, a wall-clock timeout that kills the whole tree,
and exactly the environment of the spec.  It does **not** isolate the file
system (``writable`` / ``hidden`` are not enforced: the frozen-file check after
the run is the defence) and it cannot cut the network, so a spec asking for
network ``none`` is refused rather than silently run with the network on.

How the limits behave:

* memory: ``RLIMIT_AS`` (address space) of ``memory_mb``.  An allocation past it
  fails inside the child (Python raises ``MemoryError``); the process is not
  killed, so ``killed`` stays None and the child exits non-zero.  Programs that
  reserve large virtual ranges up front (some JITs) may fail early under it.
* CPU time: ``RLIMIT_CPU`` of ``cpu_seconds`` (SIGXCPU, then SIGKILL one second
  later); a run ended by SIGXCPU reports ``killed="cpu"``.
* file size: ``RLIMIT_FSIZE`` of ``max_file_mb`` (also bounds captured output);
  core dumps are disabled.
* processes: ``RLIMIT_NPROC`` counts *every* process of the real user id and is
  not enforced at all for root (CAP_SYS_RESOURCE).  So for a non-root user the
  limit is set to ``max_processes`` plus the processes the user already runs,
  and in every case a watch polls ``/proc`` every :data:`WATCH_INTERVAL`
  seconds and kills the tree (``killed="processes"``) once it holds more than
  ``max_processes`` processes.  The watch is a poll: a burst can overshoot the
  ceiling between two looks, and a process that calls ``setsid()`` and
  re-parents to init leaves the tree unseen (``bwrap`` and ``docker`` close that
  hole with a PID namespace / the container's pids cgroup).

The limits are applied with util-linux ``prlimit`` in front of the command when
it is installed (nothing runs in the forked child before ``exec``, which is safe
with threads); otherwise through ``preexec_fn``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from agentdescent_core.errors import SandboxSetupError as SandboxSetupError
from agentdescent_core.sandbox.memwatch import MemoryGuard
from agentdescent_core.sandbox.reaper import live_pids, start_ticks, sweep, tree_members
from agentdescent_core.sandbox.spec import Limits, RunResult, RunSpec

OUTPUT_LIMIT_BYTES = 512_000
"""Captured stdout / stderr beyond this many bytes keep their head and tail only."""

WATCH_INTERVAL = 0.05
"""Seconds between two looks at the process tree (process-count ceiling)."""

_MIB = 1024 * 1024
_KILL_ROUNDS = 50


class StrayProcessesWarning(UserWarning):
    """A ``local`` run left processes behind; they were killed (``RunResult.reaped``)."""


# --------------------------------------------------------------------------- limits


def _uid_process_count(uid: int, pids: frozenset[str]) -> int:
    """How many of ``pids`` (a :func:`.reaper.live_pids` listing) belong to ``uid``."""
    count = 0
    for name in pids:
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += 1
        except OSError:
            continue
    return count


def _rlimits(limits: Limits, pids: frozenset[str]) -> dict[int, tuple[int, int]]:
    values: dict[int, tuple[int, int]] = {
        resource.RLIMIT_AS: (limits.memory_mb * _MIB,) * 2,
        resource.RLIMIT_CPU: (limits.cpu_seconds, limits.cpu_seconds + 1),
        resource.RLIMIT_FSIZE: (limits.max_file_mb * _MIB,) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    if os.geteuid() != 0:
        nproc = limits.max_processes + _uid_process_count(os.getuid(), pids)
        values[resource.RLIMIT_NPROC] = (nproc, nproc)
    return values


_PRLIMIT_OPTIONS = {
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_NPROC: "--nproc",
}


def _limited(argv: Sequence[str], limits: Limits, pids: frozenset[str],
             ) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to run (with a ``prlimit`` prefix) or a ``preexec_fn`` setting the limits.

    ``pids`` is the current :func:`.reaper.live_pids` listing (the processes the
    user already runs count against ``RLIMIT_NPROC``).
    """
    values = _rlimits(limits, pids)
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if prlimit is not None:
        options = [f"{_PRLIMIT_OPTIONS[res]}={soft}:{hard}" for res, (soft, hard) in values.items()]
        return [prlimit, *options, "--", *argv], None

    def apply() -> None:  # pragma: no cover - only without util-linux
        for res, pair in values.items():
            resource.setrlimit(res, pair)

    return list(argv), apply


# --------------------------------------------------------------------------- process tree


def _kill_tree(root: int) -> int:
    """SIGKILL the root's group, then sweep the session/descendants until none is left.

    Returns how many processes besides the root were alive to be killed.
    """
    seen = tree_members(root) - {root}
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    for _ in range(_KILL_ROUNDS):
        members = tree_members(root) - {root}
        if not members:
            break
        seen |= members
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        time.sleep(0.01)
    return len(seen)


_LIVE_ROOTS: set[int] = set()
_LIVE_LOCK = threading.Lock()


def _other_runs(root: int) -> set[int]:
    """The processes of the other runs of this process still going on (never swept)."""
    with _LIVE_LOCK:
        others = _LIVE_ROOTS - {root}
    members: set[int] = set()
    for other in others:
        members |= tree_members(other) | {other}
    return members


def _exited(pid: int) -> bool:
    """Has the child exited? (without reaping it, so its pid stays ours)"""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _wait_exit(pid: int, pidfd: int | None, seconds: float) -> None:
    if seconds <= 0:
        return
    if pidfd is not None:
        import select

        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(seconds * 1000)
        return
    end = time.monotonic() + seconds
    pause = 0.001
    while not _exited(pid):
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.02)


# --------------------------------------------------------------------------- output


def read_output(handle: IO[bytes], limit: int = OUTPUT_LIMIT_BYTES) -> str:
    """Decode a captured stream, keeping head and tail when it is longer than ``limit``."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if size <= limit:
        return handle.read().decode("utf-8", errors="replace")
    half = limit // 2
    head = handle.read(half)
    handle.seek(size - half)
    tail = handle.read(half)
    dropped = size - 2 * half
    return (
        head.decode("utf-8", errors="replace")
        + f"\n... [{dropped} bytes of output dropped] ...\n"
        + tail.decode("utf-8", errors="replace")
    )


# --------------------------------------------------------------------------- supervision


def run_supervised(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    limits: Limits,
    wrapper_processes: int = 0,
    signal_exit_codes: bool = False,
    sweep_paths: Sequence[Path] = (),
    private_tmpfs: Sequence[str] = (),
) -> RunResult:
    """Run ``argv`` under the limits, never past ``timeout``; leave no process behind.

    ``wrapper_processes`` is how many processes a sandbox tool in front of the
    command keeps alive (bwrap's monitor and PID-namespace init); they do not
    count against ``max_processes``.  ``signal_exit_codes`` reads exit statuses
    128 + N as death by signal N (for a wrapper that reports signals that way).
    Output goes to unlinked temporary files, so a grandchild that keeps a
    descriptor open cannot hang the read.  ``sweep_paths`` (the workspace and
    scratch of a run without a PID namespace): after the tree is killed, every
    process found there is killed too (:func:`.reaper.sweep`); the result's
    ``reaped`` counts all of them.  ``limits.memory_mb`` also bounds the whole
    tree (:mod:`.memwatch`: a cgroup, else a watcher that adds the sandbox's
    ``private_tmpfs`` mounts to the sum).
    """
    guard = MemoryGuard(limits, private_tmpfs=private_tmpfs)
    # One listing of /proc for both the RLIMIT_NPROC count and the sweep's ``older``.
    live = live_pids() if sweep_paths or os.geteuid() != 0 else frozenset()
    command, preexec = _limited(argv, limits, live)
    command = guard.wrap(command, env)
    ceiling = limits.max_processes + wrapper_processes
    start = time.monotonic()
    deadline = start + timeout
    killed: str | None = None
    older = live if sweep_paths else frozenset()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=preexec,
                close_fds=True,
            )
        except OSError as exc:
            guard.finish()
            raise SandboxSetupError(
                f"cannot start {command[0]!r} in {cwd}: {exc}; check that the command and the "
                "working directory exist"
            ) from exc
        since = start_ticks(proc.pid)
        with _LIVE_LOCK:
            _LIVE_ROOTS.add(proc.pid)
        guard.started(proc.pid)
        pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(proc.pid)
            except OSError:
                pidfd = None
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    killed = "timeout"
                    break
                _wait_exit(proc.pid, pidfd, min(left, WATCH_INTERVAL))
                if _exited(proc.pid):
                    break
                members = tree_members(proc.pid)
                if len(members) > ceiling:
                    killed = "processes"
                    break
                killed = guard.check(members)
                if killed is not None:
                    break
        finally:
            # The leader is not reaped yet, so its pid (= group and session id) cannot be reused.
            reaped = _kill_tree(proc.pid)
            if sweep_paths:
                reaped += sweep(sweep_paths, since=since, older=older,
                                spare=lambda: _other_runs(proc.pid))
            with _LIVE_LOCK:
                _LIVE_ROOTS.discard(proc.pid)
            returncode = proc.wait()
            killed = killed or guard.finish()
            if pidfd is not None:
                os.close(pidfd)
        duration = time.monotonic() - start
        stdout = read_output(out)
        stderr = read_output(err)
    if signal_exit_codes and 128 < returncode < 128 + signal.NSIG:
        returncode = -(returncode - 128)
    result_code: int | None = returncode
    if killed is not None:
        result_code = None
    elif returncode == -signal.SIGXCPU:
        killed, result_code = "cpu", None
    return RunResult(
        returncode=result_code, stdout=stdout, stderr=stderr, duration=duration, killed=killed,
        reaped=reaped,
    )


def require_workspace(spec: RunSpec) -> None:
    """Refuse to run when the spec's workspace directory does not exist."""
    if not spec.workspace.is_dir():
        raise SandboxSetupError(
            f"workspace {spec.workspace} does not exist: create the workspace before running"
        )


class ProbedOnce:
    """``unavailable_reason()`` is what ``_probe()`` says, asked once per instance.

    Thread-safe: concurrent first callers wait for the one probe.
    """

    def __init__(self) -> None:
        self._reason: str | None = None
        self._probed = False
        self._lock = threading.Lock()

    def unavailable_reason(self) -> str | None:
        with self._lock:
            if not self._probed:
                self._reason = self._probe()
                self._probed = True
            return self._reason

    def _probe(self) -> str | None:
        raise NotImplementedError


def check_network(network: str, backend: str) -> None:
    """Refuse network ``none`` for a backend that cannot cut the network (``local``)."""
    if network == "none":
        raise SandboxSetupError(
            f"the {backend!r} sandbox cannot cut the network, but this run asks for network "
            "'none': use --evolve-sandbox bwrap or docker, or pass --evolve-network default "
            "to accept that candidate code can reach the network"
        )


class LocalBackend:
    """Process group, rlimits, timeouts, scrubbed environment; no file-system isolation.

    Not a security boundary: candidate code runs as the user.  What it does
    about that: after every run it kills whatever the run left behind
    (:mod:`.reaper`); :class:`~agentdescent_core.evaluation.sandboxed.SandboxedVerifier`
    refuses it while a secret is readable in ``/proc`` (:mod:`.exposure`) and
    checks the user's ``.git`` and state directory around each run
    (:mod:`.guard`).
    """

    name = "local"
    added_env: tuple[str, ...] = ()

    def unavailable_reason(self) -> str | None:
        if os.name != "posix":
            return "the local backend needs a POSIX system (process groups, rlimits)"
        return None

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec.argv`` in the workspace; ``writable``/``hidden`` are not enforced here."""
        check_network(spec.network, self.name)
        require_workspace(spec)
        result = run_supervised(
            spec.argv,
            cwd=spec.workspace,
            env=spec.env,
            timeout=spec.timeout,
            limits=spec.limits,
            sweep_paths=(spec.workspace, spec.scratch, *spec.extra_writable),
        )
        if result.reaped:
            warnings.warn(StrayProcessesWarning(
                f"a candidate's run in {spec.workspace} left {result.reaped} process(es) "
                "behind (detached into their own session, or still running when it ended); "
                "all were killed after the run. Under --evolve-sandbox local nothing stops "
                "a candidate's script from doing that: bwrap and docker contain it"
            ), stacklevel=2)
        return result

    def __repr__(self) -> str:
        return "LocalBackend()"
