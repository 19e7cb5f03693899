"""What of the host an isolating backend (``bwrap``, ``docker``) may show a candidate.

Both backends build the candidate's world from nothing and mount only what is
listed here plus the spec's own paths.  This module is the one place that
says which host paths are *system* paths (read-only, always there), which
``/etc`` entries are secrets that stay masked, and which paths can never be
exposed at all: the sockets of container daemons, through which a candidate
would get root on the host (``docker run -v /:/host``), and the directories
that hold them.  A spec that lists one of those is refused before anything
runs, whatever the backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SYSTEM_TOP_DIRS: tuple[str, ...] = (
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
)  # fmt: skip
"""Top-level system directories shown read-only (a symlink such as ``/bin -> usr/bin``
is recreated as the same symlink)."""

ETC_MASKED: tuple[str, ...] = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
    "/etc/security/opasswd", "/etc/sudoers", "/etc/sudoers.d",
    "/etc/ssh", "/etc/ssl/private", "/etc/docker", "/etc/containerd",
    "/etc/machine-id",
)  # fmt: skip
"""``/etc`` entries that hold host secrets (password hashes, host keys, daemon
configuration); ``bwrap`` shows ``/etc`` read-only with these replaced by empty ones."""

DAEMON_SOCKETS: tuple[str, ...] = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
)
"""Unix sockets of container daemons that are never shown to a candidate."""


def daemon_sockets(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The daemon sockets of this machine, resolved, plus ``DOCKER_HOST``'s unix path."""
    env = os.environ if environ is None else environ
    raw = list(DAEMON_SOCKETS)
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        raw.append(host[len("unix://") :])
    found: list[Path] = []
    for entry in raw:
        path = Path(entry)
        for form in (path, path.resolve()):
            if form not in found:
                found.append(form)
    return tuple(found)


def refuse_daemon_sockets(paths: Iterable[Path | str], backend: str) -> None:
    """Raise when a path to be mounted is a daemon socket or a directory holding one.

    Both the path as spelled and its resolved form are checked, so ``/var/run``
    (a symlink to ``/run``) is caught as well as ``/run``.
    """
    from agentdescent_core.sandbox.local import SandboxSetupError

    sockets = daemon_sockets()
    for raw in paths:
        path = Path(raw).absolute()
        for form in {path, path.resolve()}:
            for sock in sockets:
                if sock == form or sock.is_relative_to(form):
                    raise SandboxSetupError(
                        f"the {backend} sandbox will not mount {raw}: it is or contains the "
                        f"container daemon socket {sock}, which gives root on the host to "
                        "whatever can reach it; remove it from the readable/writable paths "
                        "(candidates never get a container daemon)"
                    )
