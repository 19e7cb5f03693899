"""Chunks evaluated on a Dask cluster: ``--evolve-executor dask://`` or ``dask://HOST:PORT``.

Imported only when such a spec is given (``distributed`` is the ``dask``
extra).  :meth:`DaskExecutor.connect` starts an embedded ``LocalCluster`` of
worker *processes* on 127.0.0.1 (no address) or connects to a running
scheduler; :meth:`DaskExecutor.check` compares every worker's environment
with this one; :meth:`DaskExecutor.run` ships the frozen tree once
(``scatter`` to every worker, kept there while the run lasts; a worker that
joins later fetches it from a peer, once) and submits one task per chunk,
calling :func:`~.cluster_worker.run_chunk` on the worker.

Faults:

* a worker process that dies mid-chunk: the scheduler reports the task lost
  (``KilledWorker``) and the chunk is submitted again, once, to the workers
  still there (the embedded cluster's scheduler is told not to retry by
  itself, so the one retry is ours; a cluster of your own applies its own
  ``distributed.scheduler.allowed-failures`` first).  A second loss is a
  :class:`~agentdescent_core.errors.BackendError`, which the engine tolerates
  like any failed evaluation;
* a reply whose MAC does not verify: the chunk runs again elsewhere, once; a
  second such reply stops the run (it means a worker or the network rewrites
  results);
* the scheduler unreachable: :class:`~.executor.ClusterLost`, naming the
  address; the run stops and stays resumable.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.metadata
import logging
import platform
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentdescent_core.errors import BackendError, RunStopped
from agentdescent_core.evaluation.executor import (
    ChunkRequest,
    ClusterLost,
    ExecutorError,
    ExecutorSpec,
)
from agentdescent_core.evaluation.remote import (
    ChunkReply,
    FrozenBundle,
    JobSetup,
    ReplyRejected,
    job_key,
    open_reply,
)

_DISTRIBUTION = "pytest-agentdescent"
_MATCHING = ("Workers must run the same Python environment as the controller: install "
             "them from the same lock file (or start them from the same container image) "
             "with 'pytest-agentdescent[dask]' at the same version, then start them with "
             "'dask worker ADDRESS'; see docs/scale.md")


class DaskExecutor:
    """An :class:`~.executor.Executor` over a Dask cluster; build it with :meth:`connect`."""

    def __init__(self, client: Any, cluster: Any, spec: ExecutorSpec, address: str) -> None:
        self._client = client
        self._cluster = cluster
        self.spec = spec
        self.address = address
        self._run_key = secrets.token_bytes(32)  # only the controller holds it
        self._lock = threading.Lock()
        self._scattered: dict[str, Any] = {}
        self._counts = {"remote_chunks": 0, "remote_retries": 0, "rejected_replies": 0}
        self._jobs = 0
        self._lost: ClusterLost | None = None

    # ---------------------------------------------------------------- connection

    @classmethod
    def connect(cls, spec: ExecutorSpec) -> DaskExecutor:
        """Start the embedded cluster, or connect to ``spec.address`` (ExecutorError if not)."""
        import dask
        from distributed import Client, LocalCluster

        if spec.embedded:
            # The scheduler runs in this process: with no retry of its own, a lost chunk
            # comes back to us at once, and ours is the one retry.
            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1,  # type: ignore[no-untyped-call]
                                       processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=logging.ERROR)
            try:
                client = Client(cluster)  # type: ignore[no-untyped-call]
            except BaseException:
                cluster.close()
                raise
            return cls(client, cluster, spec, str(cluster.scheduler_address))
        timeout = dask.config.get("distributed.comm.timeouts.connect")
        try:
            client = Client(spec.address, timeout=timeout)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as exc:
            raise ExecutorError(
                f"--evolve-executor {spec}: cannot reach the Dask scheduler at {spec.address} "
                f"within {timeout} ({type(exc).__name__}: {exc}); start it there "
                f"('dask scheduler') with its workers ('dask worker {spec.address}'), or check "
                "the address and that this machine can reach it"
            ) from None
        return cls(client, None, spec, spec.address)

    def check(self, backend: str) -> None:
        """Every worker runs this Python and plugin version and can run ``backend``.

        Raises :class:`ExecutorError` naming each worker that differs and how;
        a scheduler without any worker is an error too.
        """
        client = self._client
        try:
            client.wait_for_workers(1, timeout=self._connect_seconds())
        except (OSError, TimeoutError):
            raise ExecutorError(
                f"--evolve-executor {self.spec}: the Dask scheduler at {self.address} has no "
                f"worker; start at least one with 'dask worker {self.address}'"
            ) from None
        here_python = platform.python_version()
        here_version = importlib.metadata.version(_DISTRIBUTION)
        # Standard-library probes first: they answer even where this package is missing.
        pythons = client.run(platform.python_version, on_error="return")
        versions = client.run(importlib.metadata.version, _DISTRIBUTION, on_error="return")
        problems: dict[str, list[str]] = {}
        for worker in sorted(pythons):
            found = problems.setdefault(worker, [])
            python = pythons[worker]
            if python != here_python:
                found.append(f"Python {python} there, {here_python} here")
            version = versions.get(worker)
            if isinstance(version, BaseException):
                found.append(f"pytest-agentdescent is not installed there "
                             f"({type(version).__name__})")
            elif version != here_version:
                found.append(f"pytest-agentdescent {version} there, {here_version} here")
        able = [w for w in pythons if not problems[w]]
        if able:
            from agentdescent_core.evaluation.cluster_worker import environment

            here = environment()
            reports = client.run(environment, workers=able, on_error="return")
            for worker, report in reports.items():
                problems[worker].extend(environment_differences(here, report, backend))
        bad = {worker: found for worker, found in problems.items() if found}
        if bad:
            lines = "; ".join(f"worker {worker}: {', '.join(found)}"
                              for worker, found in sorted(bad.items()))
            raise ExecutorError(
                f"--evolve-executor {self.spec}: {len(bad)} of {len(problems)} workers of the "
                f"scheduler at {self.address} cannot evaluate like this controller: {lines}. "
                + _MATCHING
            )

    def _connect_seconds(self) -> float:
        import dask
        from dask.utils import parse_timedelta

        seconds = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
        return float(seconds or 10.0)

    # ---------------------------------------------------------------- running

    def run(self, setup: JobSetup, bundle: FrozenBundle,
            requests: Sequence[ChunkRequest]) -> list[ChunkReply]:
        """One checked reply per request, in order (see the module docstring for faults)."""
        if self._lost is not None:
            raise self._lost  # asked again after the cluster went: no new wait for it
        try:
            return self._run(setup, bundle, requests)
        except _LOST as exc:  # the scheduler went: every future was cancelled
            self._lost = ClusterLost(self.address, _first_line(exc))
            raise self._lost from None

    def _run(self, setup: JobSetup, bundle: FrozenBundle, requests: Sequence[ChunkRequest]
             ) -> list[ChunkReply]:
        from distributed import wait

        shipped = self._bundle(bundle)
        jobs = [self._submit(setup, shipped, request) for request in requests]
        wait([future for _job, future in jobs])  # type: ignore[no-untyped-call]
        replies = []
        for request, (job_id, future) in zip(requests, jobs, strict=True):
            replies.append(self._collect(setup, shipped, request, job_id, future))
        return replies

    def _bundle(self, bundle: FrozenBundle) -> Any:
        with self._lock:
            shipped = self._scattered.get(bundle.frozen_hash)
        if shipped is None:
            shipped = self._client.scatter(bundle, broadcast=True, hash=False)
            with self._lock:
                shipped = self._scattered.setdefault(bundle.frozen_hash, shipped)
        return shipped

    def _chunk_function(self) -> Callable[..., tuple[str, str]]:
        """What a worker runs for a chunk (:func:`.cluster_worker.run_chunk`)."""
        from agentdescent_core.evaluation.cluster_worker import run_chunk

        return run_chunk

    def _submit(self, setup: JobSetup, shipped: Any, request: ChunkRequest) -> tuple[str, Any]:
        with self._lock:
            self._jobs += 1
            job_id = f"{secrets.token_hex(8)}-{self._jobs}"
            self._counts["remote_chunks"] += 1
        future = self._client.submit(
            self._chunk_function(), setup, shipped, job_id, job_key(self._run_key, job_id),
            dict(request.state), dict(request.plan), request.seconds,
            key=f"agentdescent-chunk-{job_id}", pure=False)
        return job_id, future

    def _collect(self, setup: JobSetup, shipped: Any, request: ChunkRequest, job_id: str,
                 future: Any) -> ChunkReply:
        from distributed import KilledWorker

        retried = False
        while True:
            try:
                sealed = future.result()
                return open_reply(sealed, key=job_key(self._run_key, job_id), job_id=job_id,
                                  frozen_hash=setup.frozen_hash, plan=request.plan)
            except KilledWorker as exc:
                if retried:
                    raise BackendError(
                        f"a chunk was lost twice: the workers running it died ({exc}); the "
                        f"cluster at {self.address} is losing workers (memory, OOM killer)"
                    ) from None
            except ReplyRejected as exc:
                with self._lock:
                    self._counts["rejected_replies"] += 1
                if retried:
                    raise RunStopped("ReplyRejected", f"{exc}; it happened twice, so a worker "
                                     "of the cluster or the network to it rewrites results: "
                                     "the run stops") from None
            retried = True
            with self._lock:
                self._counts["remote_retries"] += 1
            job_id, future = self._submit(setup, shipped, request)

    # ---------------------------------------------------------------- the rest

    def describe(self) -> str:
        workers = len(self._workers())
        where = "embedded local cluster" if self.spec.embedded else "cluster"
        return f"executor: dask {where} at {self.address} ({workers} workers)"

    def slots(self) -> int:
        """Chunks the cluster runs at once: the threads of its workers (at least 1)."""
        return max(1, sum(int(w.get("nthreads", 1)) for w in self._workers().values()))

    def _workers(self) -> dict[str, Any]:
        """The scheduler's workers: address -> what it says of each (``nthreads``, ...)."""
        if self._client is None:
            return {}
        try:  # newer Dask lists only a few workers unless asked for all
            info = self._client.scheduler_info(n_workers=-1)
        except TypeError:
            info = self._client.scheduler_info()
        return dict(info.get("workers", {}))

    def usage(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        """Free the workers' workspaces and the shipped tree; stop an embedded cluster."""
        client, cluster = self._client, self._cluster
        self._scattered.clear()
        if client is not None:
            if cluster is None and self._lost is None:
                from agentdescent_core.evaluation.cluster_worker import close_workspaces

                # Best effort: a worker that cannot clean up keeps temporary files, no more.
                with contextlib.suppress(Exception):
                    client.run(close_workspaces, on_error="ignore")
            with contextlib.suppress(Exception):  # a client whose scheduler is gone
                client.close(timeout=5)
        if cluster is not None:
            cluster.close()
        self._client = self._cluster = None


#: What a client raises once its scheduler is gone (connection closed, futures cancelled).
_LOST = (OSError, TimeoutError, concurrent.futures.CancelledError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def environment_differences(here: Mapping[str, Any], there: object,
                            backend: str) -> list[str]:
    """What differs between this controller's :func:`~.cluster_worker.environment` and a worker's.

    Each entry is a phrase for the error message ("pytest 8.3 there, 8.4 here",
    "the bwrap backend is not usable there (...)"); an empty list is a match.
    """
    if isinstance(there, BaseException):
        return [f"its environment cannot be read ({_first_line(there)})"]
    if not isinstance(there, Mapping):
        return [f"its environment reads as {type(there).__name__}"]
    found = []
    for key, what in (("python", "Python"), ("implementation", "Python implementation"),
                      ("agentdescent", "pytest-agentdescent"), ("pytest", "pytest"),
                      ("wire", "reply format")):
        if there.get(key) != here.get(key):
            found.append(f"{what} {there.get(key)} there, {here.get(key)} here")
    backends = there.get("backends")
    reason = backends.get(backend, "unknown backend") if isinstance(backends, Mapping) \
        else "no backend report"
    if reason is not None:
        found.append(f"the {backend} sandbox backend is not usable there ({reason})")
    return found
