"""Where a verifier's child runs happen: the local pool, or a cluster of another engine.

A :class:`~agentdescent_core.evaluation.sandboxed.SandboxedVerifier` cuts every
evaluation into *chunks* (one child pytest over a plan of (test, repeat)).  By
default (``--evolve-executor local``) it runs them itself, in its own pool of
workspaces, ``eval_concurrency`` at a time; nothing in this module is involved
and that path is the same as before executors existed.  With an
:class:`Executor` the chunks go to a cluster instead: the verifier hands it a
:class:`ChunkRequest` per chunk and gets back, per chunk, a
:class:`~agentdescent_core.evaluation.remote.ChunkReply` whose MAC the
executor has checked (:mod:`.remote` spells what travels and how it is signed).

The spec a user writes is ``local`` or ``ENGINE://[ADDRESS]``
(:func:`parse_executor`); ``dask://`` with no address starts an embedded local
cluster of several worker processes, ``dask://HOST:PORT`` connects to a running
scheduler.  Dask is an extra (``pip install 'pytest-agentdescent[dask]'``),
imported only by :func:`open_executor` when a ``dask://`` spec is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agentdescent_core.errors import AgentDescentError, RunInterrupted

if TYPE_CHECKING:
    from agentdescent_core.evaluation.remote import ChunkReply, FrozenBundle, JobSetup

LOCAL = "local"
#: The engines ``--evolve-executor`` accepts after ``local`` (``ENGINE://[ADDRESS]``).
ENGINES: tuple[str, ...] = ("dask",)
#: Worker processes of an embedded cluster (``dask://`` with no address).
DEFAULT_LOCAL_WORKERS = 2


class ExecutorError(AgentDescentError):
    """The executor cannot start: a bad spec, an unreachable cluster, a worker that differs.

    Raised at connection time, before anything is evaluated; the message names
    the address or the worker and what to do.
    """


class ClusterLost(RunInterrupted):
    """The cluster stopped answering during the run: the run stops and stays resumable.

    A :class:`~agentdescent_core.errors.RunInterrupted`, so no retry or worker
    tolerance swallows it and the loop kernel leaves the run unfinished (an
    interruption, like Ctrl-C): the same command resumes it once the cluster is
    back, with every result already evaluated kept in the eval cache.
    """

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(
            "ClusterLost",
            f"the evaluation cluster at {address} stopped answering ({detail}); the run "
            "stopped and stays unfinished: start the scheduler and its workers again (or "
            "run with --evolve-executor local) and run the same command to resume it",
        )
        self.address = address


@dataclass(frozen=True)
class ExecutorSpec:
    """A parsed ``--evolve-executor`` value: ``engine`` is ``local`` or one of :data:`ENGINES`.

    ``address`` is empty for ``local`` and for an embedded cluster; ``workers``
    is how many worker processes an embedded cluster starts.
    """

    engine: str
    address: str = ""
    workers: int = DEFAULT_LOCAL_WORKERS
    #: The value as the user wrote it (what messages show).
    given: str = ""

    @property
    def is_local(self) -> bool:
        return self.engine == LOCAL

    @property
    def embedded(self) -> bool:
        """Does this spec start its own cluster on this machine (no address given)?"""
        return not self.is_local and not self.address

    def __str__(self) -> str:
        return self.given or (LOCAL if self.is_local else f"{self.engine}://{self.address}")


def parse_executor(text: str) -> ExecutorSpec:
    """``local`` or ``ENGINE://[ADDRESS]`` as an :class:`ExecutorSpec`; ValueError says the form.

    ``ADDRESS`` is what the engine's client takes (``tcp://host:8786`` or
    ``host:8786`` for Dask; a bare ``host:port`` gets ``tcp://``).
    """
    value = str(text).strip()
    if value == LOCAL:
        return ExecutorSpec(LOCAL)
    engine, sep, address = value.partition("://")
    if not sep or engine not in ENGINES:
        raise ValueError(
            f"{value!r} is not an executor: give 'local' or "
            + " or ".join(f"'{e}://' (an embedded cluster) or '{e}://HOST:PORT'" for e in ENGINES)
        )
    address = address.strip().rstrip("/")
    if address and "://" not in address:
        address = f"tcp://{address}"
    if any(ch.isspace() for ch in address):
        raise ValueError(f"{value!r}: the address may not contain spaces")
    return ExecutorSpec(engine, address, given=value)


class Executor(Protocol):
    """Runs a verifier's chunks somewhere else and brings back checked replies.

    ``setup`` is sent once and holds what every chunk of the verifier shares
    (the frozen tree's identity, the child configuration, the backend name);
    ``bundle`` is the frozen tree itself, shipped to a worker only the first
    time it needs it.  ``run`` returns one reply per request, in order, each
    already MAC-checked; a worker that died mid-chunk has its chunk retried on
    another worker once.  ``check`` verifies that every worker can run
    ``backend`` (raises :class:`ExecutorError` naming the worker).  ``slots``
    is how many chunks the cluster runs at once (its workers' threads).
    """

    address: str

    def check(self, backend: str) -> None: ...

    def run(self, setup: JobSetup, bundle: FrozenBundle,
            requests: Sequence[ChunkRequest]) -> list[ChunkReply]: ...

    def describe(self) -> str: ...

    def slots(self) -> int: ...

    def usage(self) -> Mapping[str, int]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ChunkRequest:
    """One chunk to run remotely: the candidate's files, the plan, the time it has left.

    ``seconds`` is relative (clocks of two machines do not share a monotonic
    origin); the worker turns it into its own deadline when the chunk starts.
    """

    state: Mapping[str, str]
    plan: Mapping[str, tuple[int, int]]
    seconds: float


def open_executor(spec: ExecutorSpec, *, backend: str) -> Executor:
    """The executor ``spec`` names, connected and checked for ``backend``; never ``local``.

    Raises :class:`~agentdescent_core.errors.MissingExtra` when the engine's
    extra is not installed, :class:`ExecutorError` when the cluster cannot be
    reached or a worker's environment differs from this one.
    """
    if spec.is_local:
        raise ValueError("the local executor is the verifier's own pool: there is nothing to open")
    from agentdescent_core.extras import require_extra

    require_extra("dask")
    from agentdescent_core.evaluation.dask_executor import DaskExecutor

    executor = DaskExecutor.connect(spec)
    try:
        executor.check(backend)
    except BaseException:
        executor.close()
        raise
    return executor
