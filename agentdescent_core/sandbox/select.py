"""Choosing a backend by name (``--evolve-sandbox``) and saying which one runs.

Backends are built once per process and per image, and each one caches its own
availability probe, so ``auto`` costs a daemon ping and a ``bwrap`` trial run
once, not per candidate.
"""

from __future__ import annotations

import threading

from agentdescent_core.sandbox.spec import BACKEND_NAMES, Backend

AUTO_ORDER: tuple[str, ...] = ("docker", "bwrap", "local")
"""Strongest first: ``auto`` takes the first of these that works on this machine."""

_lock = threading.Lock()
_backends: dict[tuple[str, str | None], Backend] = {}


def _build(name: str, image: str | None) -> Backend:
    if name == "local":
        from agentdescent_core.sandbox.local import LocalBackend

        return LocalBackend()
    if name == "bwrap":
        from agentdescent_core.sandbox.bwrap import BwrapBackend

        return BwrapBackend()
    from agentdescent_core.sandbox.container import DockerBackend

    return DockerBackend(image=image)


def _cached(name: str, image: str | None) -> Backend:
    key = (name, image if name == "docker" else None)
    with _lock:
        backend = _backends.get(key)
        if backend is None:
            backend = _backends[key] = _build(name, key[1])
        return backend


def get_backend(name: str, *, image: str | None = None) -> Backend:
    """The backend called ``name``; ``auto`` is the strongest usable one here.

    A named backend is returned even when it cannot run here: callers check
    ``unavailable_reason()`` and tell the user.  ``image`` only matters for
    ``docker`` (None: the tiny image the backend builds itself).
    """
    if name not in BACKEND_NAMES:
        raise ValueError(
            f"unknown sandbox backend {name!r}: --evolve-sandbox takes one of "
            + ", ".join(BACKEND_NAMES)
        )
    if name != "auto":
        return _cached(name, image)
    # ``local`` is last and taken only when neither docker nor bwrap works here.
    for candidate in AUTO_ORDER:
        backend = _cached(candidate, image)
        if backend.unavailable_reason() is None:
            return backend
    return _cached("local", None)


_SUMMARY = {
    "local": "NOT a security boundary: candidate code runs as you and can read and write "
             "whatever you can; no file-system isolation; own process group and rlimits, "
             "leftover processes killed, your .git and the state dir checked after each "
             "run; network not cut",
    "bwrap": "namespaces; host and workspace read-only except artifacts and scratch",
    "docker": "container; host dirs read-only except artifacts and scratch, caps dropped",
}


def describe_backend(backend: Backend, network: str | None = None) -> str:
    """One line for the run header, e.g. ``sandbox: bwrap (namespaces; ..., network none)``."""
    summary = _SUMMARY.get(backend.name, "custom backend")
    image = getattr(backend, "image_name", None)
    if backend.name == "docker" and isinstance(image, str):
        summary += f"; image {image}"
    if network is not None:
        summary += f"; network {network}"
    reason = backend.unavailable_reason()
    if reason is not None:
        summary += f"; NOT USABLE: {reason}"
    return f"sandbox: {backend.name} ({summary})"
