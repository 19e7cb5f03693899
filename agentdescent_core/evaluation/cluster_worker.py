"""The worker side of a remote evaluation: run one chunk as a local evaluation would.

These functions run inside a cluster worker process (the engine pickles them by
reference, so the worker imports this module from its own install of the same
version).  They import no engine: any executor can call them.

:func:`run_chunk` receives the :class:`~.remote.JobSetup`, the frozen tree
(:class:`~.remote.FrozenBundle`), a job id and key, and one chunk; it

1. turns the bundle into a git repository once per machine, cached under the
   frozen hash in this user's temporary directory (:func:`frozen_repo`), and
   builds a :class:`~agentdescent_core.sandbox.workspace.Workspace` from it
   once per worker process, checking that the copy hashes to the frozen hash
   the controller sent (a stale or tampered cache is rebuilt, never used);
2. writes the candidate's files, runs :func:`~.child.run_tests` under the
   backend named in the setup (built here, on the worker), and does the frozen
   check there, exactly as the verifier's local path does;
3. returns the :class:`~.remote.ChunkReply` sealed with the job's key.

:func:`environment` is what the controller compares with its own at
connection time (:mod:`.dask_executor`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentdescent_core.errors import BackendError
from agentdescent_core.evaluation.child import ChildConfig, run_tests
from agentdescent_core.evaluation.remote import (
    WIRE_VERSION,
    WORKER_LOCAL_VARIABLES,
    ChunkReply,
    FrozenBundle,
    JobSetup,
    _git,
    seal_reply,
    worker_tmp,
)
from agentdescent_core.redact import Redactor
from agentdescent_core.sandbox.spec import BACKEND_NAMES
from agentdescent_core.sandbox.workspace import Workspace

_RUN_ATTEMPTS = 2
_lock = threading.Lock()
#: (frozen hash, roots, frozen rules, subdir) -> idle workspaces of this process.
_idle: dict[tuple[object, ...], list[Workspace]] = {}


def environment() -> dict[str, Any]:
    """What must match between the controller and a worker: versions and usable backends.

    Also the machine's name, for messages.  Each backend's entry is None when
    it works here, else why not.
    """
    from agentdescent_core.sandbox.select import get_backend

    backends: dict[str, str | None] = {}
    for name in BACKEND_NAMES:
        if name == "auto":
            continue
        try:
            backends[name] = get_backend(name).unavailable_reason()
        except Exception as exc:  # a backend whose SDK is missing here
            backends[name] = str(exc)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "agentdescent": _version("pytest-agentdescent"),
        "pytest": _version("pytest"),
        "wire": WIRE_VERSION,
        "backends": backends,
        "host": socket.gethostname(),
        "executable": sys.executable,
    }


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def frozen_repo(bundle: FrozenBundle) -> tuple[Path, str]:
    """The cached repository holding the bundle's tree, and a commit of that tree.

    Built once per machine and frozen hash: the pack is unpacked into a fresh
    repository, a commit of its tree is made, and the ignored files are put in
    its working tree, listed in ``.git/info/exclude`` (so the workspace copies
    them as it copies a user's ignored modules).  Built in a temporary
    directory and renamed into place, so concurrent workers never see half of one.
    """
    cache = worker_tmp("agentdescent-frozen")
    final = cache / bundle.frozen_hash
    marker = final / ".agentdescent-commit"
    if marker.is_file():
        return final / "repo", marker.read_text("utf-8").strip()
    build = Path(tempfile.mkdtemp(prefix=f"{bundle.frozen_hash[:12]}-", dir=cache))
    try:
        repo = build / "repo"
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_AUTHOR_NAME": "agentdescent", "GIT_AUTHOR_EMAIL": "agentdescent@invalid",
               "GIT_COMMITTER_NAME": "agentdescent",
               "GIT_COMMITTER_EMAIL": "agentdescent@invalid",
               "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
               "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
        _git(["init", "-q", f"--object-format={bundle.object_format}", str(repo)], env)
        _git(["unpack-objects", "-q"], env, stdin=bundle.pack, cwd=str(repo))
        commit = _git(["commit-tree", bundle.tree, "-m", "frozen tree"], env,
                      cwd=str(repo)).decode().strip()
        exclude = []
        for path, data in sorted(bundle.ignored.items()):
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            exclude.append("/" + "".join("\\" + ch if ch in "*?[]\\!# " else ch for ch in path))
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "exclude").write_text("\n".join(exclude) + "\n", "utf-8")
        (build / ".agentdescent-commit").write_text(commit + "\n", "utf-8")
        try:
            build.rename(final)
        except OSError:  # another worker of this machine was first: use its copy
            if not marker.is_file():
                raise
        return final / "repo", marker.read_text("utf-8").strip()
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)


def _workspace(setup: JobSetup, bundle: FrozenBundle) -> Workspace:
    key = _pool_key(setup)
    with _lock:
        pool = _idle.setdefault(key, [])
        if pool:
            return pool.pop()
    for _attempt in range(2):
        repo, commit = frozen_repo(bundle)
        workspace = Workspace.create(repo, commit, tree=setup.tree(), frozen=setup.frozen())
        got = workspace.frozen_tree_hash
        if got == setup.frozen_hash:
            return workspace
        workspace.close()
        # a cache that does not give the tree it is named after: drop it, build it again
        shutil.rmtree(repo.parent, ignore_errors=True)
    raise BackendError(
        f"the worker's copy of the frozen tree hashes to {got[:12]}, not "
        f"{setup.frozen_hash[:12]} as the controller's does: the worker's git or "
        "file system changes files (line endings, modes); use the same image as "
        "the controller")


def _pool_key(setup: JobSetup) -> tuple[object, ...]:
    return (setup.frozen_hash, setup.roots, setup.frozen_patterns, setup.frozen_roots,
            setup.frozen_files)


def _release(setup: JobSetup, workspace: Workspace) -> None:
    with _lock:
        _idle.setdefault(_pool_key(setup), []).append(workspace)


def run_chunk(setup: JobSetup, bundle: FrozenBundle, job_id: str, key: bytes,
              state: Mapping[str, str], plan: Mapping[str, tuple[int, int]],
              seconds: float) -> tuple[str, str]:
    """Run one chunk here and return its reply sealed with ``key`` (see the module docstring).

    A failure of this machine (git, the disk) comes back as a BackendError
    naming the worker, never as an OSError the controller would take for a
    lost connection.
    """
    try:
        return _run_chunk(setup, bundle, job_id, key, state, plan, seconds)
    except OSError as exc:
        raise BackendError(f"worker {_worker_name()} could not run a chunk: "
                           f"{type(exc).__name__}: {exc}") from None


def _run_chunk(setup: JobSetup, bundle: FrozenBundle, job_id: str, key: bytes,
               state: Mapping[str, str], plan: Mapping[str, tuple[int, int]],
               seconds: float) -> tuple[str, str]:
    from agentdescent_core.evaluation.sandboxed import _without_empty_dirs
    from agentdescent_core.sandbox.select import get_backend

    started = time.monotonic()
    deadline = started + seconds
    backend = get_backend(setup.backend, image=setup.image)
    reason = backend.unavailable_reason()
    if reason is not None:
        raise BackendError(f"the {setup.backend} backend is not usable on worker "
                           f"{socket.gethostname()}: {reason}")
    host_env = dict(setup.env)
    for name in WORKER_LOCAL_VARIABLES:
        if name in os.environ:
            host_env[name] = os.environ[name]
    workspace = _workspace(setup, bundle)
    config = ChildConfig(
        backend=backend, env_allow=setup.env_allow, host_env=host_env,
        hidden=(*(Path(p) for p in setup.hidden), worker_tmp("agentdescent-frozen")),
        network=setup.network,  # type: ignore[arg-type]
        limits=setup.limits, test_timeout=setup.test_timeout, run_timeout=setup.run_timeout,
        output_chars=setup.output_chars, pytest_args=setup.pytest_args,
        max_restarts=setup.max_restarts, trace_reads=setup.trace_reads,
    )
    redact = Redactor.from_env(host_env)
    try:
        for attempt in range(_RUN_ATTEMPTS):
            workspace.reset(state)
            scratch = workspace.new_run_scratch()
            try:
                outcome = run_tests(workspace.root / setup.subdir, plan, config,
                                    scratch=scratch, state_dir=workspace.state_dir,
                                    writable=workspace.writable_paths(), redact=redact,
                                    deadline=deadline, workspace_writes=workspace.writes())
            except BackendError:
                if attempt + 1 >= _RUN_ATTEMPTS:
                    workspace.check()
                    raise
                continue
            check = _without_empty_dirs(workspace.check(), workspace.root)
            if not check.ok:
                workspace.reset(state)  # restore the frozen files now, not at the next run
            reply = ChunkReply(job_id, setup.frozen_hash, _worker_name(), outcome, check,
                               time.monotonic() - started)
            return seal_reply(reply, key)
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        _release(setup, workspace)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def close_workspaces() -> int:
    """Remove every idle workspace of this process (the executor calls it at the end)."""
    with _lock:
        pools = list(_idle.values())
        _idle.clear()
    count = 0
    for pool in pools:
        for workspace in pool:
            with contextlib.suppress(OSError):
                workspace.close()
            count += 1
    return count
