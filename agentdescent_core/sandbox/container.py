"""The ``docker`` backend: one throw-away container per run, through the ``docker`` SDK.

No image is pulled.  By default the container starts from a tiny local image
with an empty root file system (imported once from an empty tar and tagged
:data:`EMPTY_IMAGE`); the host's system directories, the interpreter and its
virtualenv are bind-mounted read-only at their own paths, so the child runs
the parent's exact Python.  A user-given image must already exist locally.

What the container sees: read-only ``/usr``, ``/lib*``, ``/bin``,
a few ``/etc`` files (users, name service, TLS certificates, alternatives,
time zone), the ``readable`` paths and the workspace; read-write the
``writable`` paths, the scratch directory and ``extra_writable`` (and, with
``workspace_writes``, the whole workspace copy, its protected files bound
read-only on top); a private
tmpfs ``/tmp`` and a private ``/dev/shm`` (own IPC namespace), each of at
most ``limits.memory_mb`` and charged to the container's memory limit; nothing else of the host (the
user's repository, ``$HOME``, ``/run`` with the docker socket, and the host
``/tmp`` and ``/dev/shm`` are simply not mounted; a ``hidden`` directory that
lies inside a mounted path is covered by an empty tmpfs).  A spec path that is
or holds a container daemon's socket is refused
(:func:`~agentdescent_core.sandbox.hostview.refuse_daemon_sockets`).  The root file system is
read-only, docker's init is PID 1 (signals and zombies behave as on the
host), every capability is dropped, ``no-new-privileges`` is set, it runs
as the caller's uid:gid, and the network is ``none`` or the default bridge.

Limits: ``mem_limit`` (no swap on top; tmpfs pages are charged to the
container's cgroup too; at the first OOM kill inside the container, seen on
the daemon's event stream, the whole container is killed and the run reported
as ``killed="memory"``), ``pids_limit`` (fork fails past it), one CPU
(``nano_cpus``), ``cpu`` and ``fsize`` ulimits.  On timeout the container is
killed; it is always removed.  As with ``bwrap``, scratch and
``extra_writable`` directories are created when missing and a missing
``writable`` path is not mounted.  Docker adds ``HOSTNAME`` to the
environment, and ``PATH`` / ``HOME`` only when the spec does not set them.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from agentdescent_core.sandbox.hostview import refuse_daemon_sockets
from agentdescent_core.sandbox.local import (
    ProbedOnce,
    SandboxSetupError,
    read_output,
    require_workspace,
)
from agentdescent_core.sandbox.spec import RunResult, RunSpec

EMPTY_IMAGE = "agentdescent-empty:1"
"""Tag of the empty-root image the backend imports when no image is given."""

SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin")
"""Host system directories mounted read-only into the empty image.

``/sbin`` is left out: docker mounts its init (``/sbin/docker-init``) there, which
a read-only bind of the host's ``/sbin`` would hide (``/usr/sbin`` is inside ``/usr``).
"""
SYSTEM_ETC: tuple[str, ...] = (
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/mime.types",
)

_LABEL = "agentdescent.sandbox"
_STOP_GRACE = 10.0


class _OomWatch:
    """Kills the container at its first OOM event, so the run stops with ``memory``.

    Without it a candidate's process killed by the container's OOM killer only
    fails its test, and the run goes on with what it holds (a full tmpfs).
    """

    def __init__(self, client: Any, container: Any) -> None:
        import docker.errors

        self.hit = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._stream = client.events(
                decode=True, filters={"container": container.id, "event": "oom"}
            )
        except docker.errors.DockerException:
            self._stream = None
            return
        self._thread = threading.Thread(target=self._watch, args=(container,), daemon=True)
        self._thread.start()

    def _watch(self, container: Any) -> None:
        try:
            for _event in self._stream:
                self.hit.set()
                with contextlib.suppress(Exception):
                    container.kill()
                return
        except Exception:  # the stream was closed under us: the run is over
            return

    def close(self) -> None:
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()
            self._stream = None
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None


def _empty_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    return buffer.getvalue()


class DockerBackend(ProbedOnce):
    """A container per run: the same isolation as ``bwrap``, plus a pids/memory cgroup."""

    name = "docker"
    added_env: tuple[str, ...] = ("HOSTNAME", "PATH", "HOME")

    def __init__(
        self, image: str | None = None, *, cpus: float = 1.0, empty_image: str = EMPTY_IMAGE
    ) -> None:
        if ":" not in empty_image:
            raise ValueError(f"empty_image {empty_image!r} must be 'repository:tag'")
        super().__init__()
        self._image = image
        self._empty_image = empty_image
        self.cpus = cpus
        self._client: Any = None

    @property
    def image_name(self) -> str:
        return self._image or self._empty_image

    # ------------------------------------------------------------------ availability

    def _probe(self) -> str | None:
        """The SDK, the daemon, and the image (imported here when it is ours)."""
        from agentdescent_core.errors import MissingExtra
        from agentdescent_core.extras import require_extra

        try:
            require_extra("docker")
        except MissingExtra as exc:  # auto skips docker; an explicit choice shows this
            return str(exc)
        import docker
        import docker.errors
        try:
            client = docker.from_env(timeout=30)
            client.ping()
        except Exception as exc:  # the SDK raises several unrelated types here
            return (
                f"cannot reach the docker daemon ({exc.__class__.__name__}: {exc}): "
                "start dockerd or set DOCKER_HOST"
            )
        try:
            client.images.get(self.image_name)
        except docker.errors.ImageNotFound:
            if self._image is not None:
                return (
                    f"docker image {self._image!r} is not present locally and is never pulled "
                    f"by the sandbox: docker pull {self._image} (or omit the image to use a "
                    "built-in empty one)"
                )
            repository, tag = self._empty_image.rsplit(":", 1)
            try:
                client.api.import_image_from_data(_empty_tar(), repository=repository, tag=tag)
                client.images.get(self._empty_image)
            except Exception as exc:
                return f"cannot create the empty image {self._empty_image} ({exc})"
        except Exception as exc:
            return f"cannot inspect docker image {self.image_name!r} ({exc})"
        self._client = client
        return None

    def _ready_client(self) -> Any:
        reason = self.unavailable_reason()
        if reason is not None:
            raise SandboxSetupError(f"the docker sandbox is not usable: {reason}")
        return self._client

    # ------------------------------------------------------------------ mounts

    def mounts(self, spec: RunSpec) -> tuple[list[tuple[str, bool]], list[str]]:
        """(host path, read_only) bind mounts and tmpfs targets for ``spec``.

        Raises :class:`SandboxSetupError` when a spec path is a container daemon's
        socket or holds one.
        """
        refuse_daemon_sockets(
            [spec.workspace, spec.scratch, *spec.readable, *spec.writable, *spec.extra_writable],
            self.name,
        )
        binds: dict[str, bool] = {}

        def bind(path: Path | str, read_only: bool) -> None:
            target = str(Path(path).absolute())
            if not Path(target).exists():
                return
            # A path both readable and writable is writable; never bind one twice.
            binds[target] = binds.get(target, True) and read_only

        if self._image is None:
            for system in (*SYSTEM_DIRS, *SYSTEM_ETC):
                bind(system, True)
        for path in spec.readable:
            bind(path, True)
        writes = spec.workspace_writes
        if writes is not None and spec.workspace.absolute().is_relative_to(writes.root.absolute()):
            # Tests may write into the copy; its frozen files stay read-only one by one.
            bind(writes.root, False)
        else:
            bind(spec.workspace, True)
        for path in (*spec.writable, spec.scratch, *spec.extra_writable):
            bind(path, False)
        if writes is not None:
            for path in writes.protected:
                bind(path, True)
        tmpfs = ["/tmp"]
        for hidden in spec.hidden:
            target = Path(hidden).absolute()
            inside = any(target.is_relative_to(p) and str(target) != p for p in binds)
            if target.is_dir() and inside and str(target) not in binds:
                tmpfs.append(str(target))
        ordered = sorted(binds.items(), key=lambda item: (len(Path(item[0]).parts), item[0]))
        return ordered, tmpfs

    # ------------------------------------------------------------------ run

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec`` in a fresh container; kill it on timeout; always remove it."""
        import docker.errors
        import docker.types

        client = self._ready_client()
        require_workspace(spec)
        for directory in (spec.scratch, *spec.extra_writable):
            Path(directory).mkdir(parents=True, exist_ok=True)
        binds, tmpfs = self.mounts(spec)
        limits = spec.limits
        memory = f"{limits.memory_mb}m"
        file_bytes = limits.max_file_mb * 1024 * 1024
        try:
            container = client.containers.create(
                self.image_name,
                command=list(spec.argv),
                environment=dict(spec.env),
                working_dir=str(spec.workspace.absolute()),
                user=f"{os.getuid()}:{os.getgid()}",
                mounts=[
                    docker.types.Mount(target=path, source=path, type="bind", read_only=ro)
                    for path, ro in binds
                ],
                tmpfs={path: f"mode=1777,size={limits.memory_mb}m" for path in tmpfs},
                ipc_mode="private",
                shm_size=memory,
                read_only=True,
                init=True,
                network_mode="none" if spec.network == "none" else "bridge",
                mem_limit=memory,
                memswap_limit=memory,
                pids_limit=limits.max_processes,
                nano_cpus=int(self.cpus * 1e9),
                ulimits=[
                    docker.types.Ulimit(
                        name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds + 1
                    ),
                    docker.types.Ulimit(name="fsize", soft=file_bytes, hard=file_bytes),
                    docker.types.Ulimit(name="core", soft=0, hard=0),
                ],
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                log_config=docker.types.LogConfig(
                    type="json-file", config={"max-size": "20m", "max-file": "1"}
                ),
                labels={_LABEL: "1"},
                stdin_open=False,
                tty=False,
                detach=True,
            )
        except docker.errors.DockerException as exc:
            raise SandboxSetupError(
                f"docker could not create the sandbox container from {self.image_name!r}: {exc}"
            ) from exc
        start = time.monotonic()
        killed: str | None = None
        returncode: int | None = None
        oom = _OomWatch(client, container)
        try:
            container.start()
            try:
                status = container.wait(timeout=spec.timeout)
                returncode = int(status.get("StatusCode", -1))
            except Exception:  # requests' ReadTimeout / ConnectionError: the wall clock ran out
                killed = "timeout"
                try:
                    container.kill()
                    container.wait(timeout=_STOP_GRACE)
                except docker.errors.DockerException:
                    pass
            duration = time.monotonic() - start
            container.reload()
            oom.close()
            if killed is None and (
                oom.hit.is_set() or container.attrs.get("State", {}).get("OOMKilled")
            ):
                killed = "memory"
            if killed is None and returncode is not None and 128 < returncode < 160:
                # Docker reports death by signal N as 128 + N; keep the spec's negative convention.
                returncode = -(returncode - 128)
            stdout = read_output(io.BytesIO(container.logs(stdout=True, stderr=False)))
            stderr = read_output(io.BytesIO(container.logs(stdout=False, stderr=True)))
        except docker.errors.DockerException as exc:
            raise SandboxSetupError(f"docker failed while running the sandbox: {exc}") from exc
        finally:
            oom.close()
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
        if killed is not None:
            returncode = None
        elif returncode == -signal.SIGXCPU:  # the cpu ulimit
            killed, returncode = "cpu", None
        return RunResult(
            returncode=returncode, stdout=stdout, stderr=stderr, duration=duration, killed=killed
        )

    def __repr__(self) -> str:
        return f"DockerBackend(image={self.image_name!r})"
