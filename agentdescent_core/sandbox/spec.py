"""The contract between whoever wants a command run in isolation and the backends.

A backend (``local``, ``bwrap``, ``docker``) runs one :class:`RunSpec` and
returns a :class:`RunResult`.  Paths are the same inside the sandbox as on the
host: the workspace, the scratch directory and the interpreter are mounted at
their own paths, so argv, environment values and output files never need
translating.  Everything a backend must enforce is in the spec; the caller
(the evaluation layer) never branches on the backend's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

Network = Literal["none", "default"]
NETWORK_MODES: tuple[str, ...] = ("none", "default")
BACKEND_NAMES: tuple[str, ...] = ("auto", "local", "bwrap", "docker")


@dataclass(frozen=True)
class Limits:
    """Resource ceilings for one run; a run that hits one fails with that reason."""

    memory_mb: int = 2048
    cpu_seconds: int = 600
    max_processes: int = 256
    max_file_mb: int = 256

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "max_processes", "max_file_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class WorkspaceWrites:
    """Let tests write into the workspace as plain ``pytest`` would, frozen files excepted.

    ``root`` (the workspace copy, which holds ``RunSpec.workspace``) is bound
    read-write by the backends that isolate the filesystem; each of the
    ``protected`` files inside it is then bound read-only on top, so a test or
    a candidate's script can create files next to them but cannot rewrite,
    delete or replace them.  What a run creates is checked and removed by the
    workspace (:meth:`~agentdescent_core.sandbox.workspace.Workspace.check`,
    ``reset``), not here.
    """

    root: Path
    protected: tuple[Path, ...] = ()


@dataclass(frozen=True)
class RunSpec:
    """One command to run in a sandbox.

    ``workspace`` is the child's working directory; inside it only the
    ``writable`` paths (absolute host paths: artifact roots, which may be files
    or directories) may be written by backends that isolate the filesystem.
    ``scratch`` is a writable directory private to this run (HOME, TMPDIR and
    the recorder's output live there); ``extra_writable`` are further writable
    host directories that outlive the run (a worker's bytecode cache).
    ``readable`` are host paths the child must be able to read besides the
    system directories (the interpreter prefix, the virtualenv, the packages on
    ``sys.path``).  ``hidden`` are host paths that must not be visible at all
    (the user's real repository), unless re-exposed through ``readable``.
    ``env`` is the complete environment: backends add nothing but what they
    need to start (never a host variable).  ``workspace_writes``, when given,
    makes the whole workspace copy writable except its protected files (see
    :class:`WorkspaceWrites`); without it only ``writable`` is.
    """

    argv: Sequence[str]
    workspace: Path
    scratch: Path
    env: Mapping[str, str]
    timeout: float
    writable: Sequence[Path] = ()
    extra_writable: Sequence[Path] = ()
    readable: Sequence[Path] = ()
    hidden: Sequence[Path] = ()
    network: Network = "default"
    limits: Limits = field(default_factory=Limits)
    workspace_writes: WorkspaceWrites | None = None

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("RunSpec.argv is empty: give the command to run")
        if self.timeout <= 0:
            raise ValueError(f"RunSpec.timeout must be positive, got {self.timeout!r}")
        if self.network not in NETWORK_MODES:
            raise ValueError(
                f"RunSpec.network must be one of {NETWORK_MODES}, got {self.network!r}"
            )


@dataclass(frozen=True)
class RunResult:
    """What came back from one run.

    ``returncode`` is None when the process was killed by the backend (then
    ``killed`` says why: ``timeout``, ``memory``, ...); a negative value is the
    signal that ended it.  ``stdout`` / ``stderr`` are decoded and truncated.
    ``reaped`` counts the processes the run left behind that the backend
    killed after it (``local``: its group, session, descendants, and every
    process found in its workspace or scratch directory).
    """

    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    killed: str | None = None
    reaped: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode is not None and self.killed is None


@runtime_checkable
class Backend(Protocol):
    """A way to run a :class:`RunSpec` with some degree of isolation."""

    name: str

    def unavailable_reason(self) -> str | None:
        """None when this backend works on this machine, else why not (for the user)."""
        ...

    def run(self, spec: RunSpec) -> RunResult:
        """Run to completion or until a limit; never hangs past ``spec.timeout``.

        Kills the whole process tree on timeout.  Raises BackendError only when
        the sandbox itself cannot be set up (not when the command fails).
        """
        ...
