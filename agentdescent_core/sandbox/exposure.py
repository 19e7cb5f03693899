"""Secrets that candidate code could read under ``local``, whatever the child's environment.

The child's environment is built from an allowlist (:mod:`.env`), but under
``local`` the child sees the host's ``/proc``: ``/proc/<pid>/environ`` of this
process (the environment it was *started* with — removing a variable from
``os.environ`` does not change it) and of every ancestor (the shell, the CI
runner) is readable by a process of the same user.  An ancestor's environment
cannot be changed from here, so the only honest answer is to refuse ``local``
while a secret is there.  :func:`exposed_secrets` says where one is;
:func:`refuse_exposed_secrets` raises the error the user sees.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from agentdescent_core.sandbox.env import is_never_passed
from agentdescent_core.sandbox.reaper import ancestors


@dataclass(frozen=True)
class Exposure:
    """A secret variable ``name`` (never its value) and where a candidate could read it."""

    name: str
    where: str


def _names(environ: bytes) -> list[str]:
    names = []
    for item in environ.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and value:
            names.append(name.decode("utf-8", "replace"))
    return names


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def exposed_secrets(environ: Mapping[str, str] | None = None) -> list[Exposure]:
    """Every secret (:data:`~.env.NEVER_PASSED`, patterns included) readable under ``local``.

    Looks at ``environ`` (default ``os.environ``), then at ``/proc/<pid>/environ``
    of this process and each of its ancestors up to pid 1.  Empty values are
    not secrets.  Unreadable ancestors (another user's) are skipped: a
    candidate running as this user cannot read them either.
    """
    found: list[Exposure] = []
    current = os.environ if environ is None else environ
    for name in sorted(current):
        if current[name] and is_never_passed(name):
            found.append(Exposure(name, "this process's environment"))
    me = os.getpid()
    for pid in ancestors():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        who = ("this process's initial environment" if pid == me
               else f"the environment of ancestor process {pid} ({_command(pid)})")
        for name in sorted(set(_names(data))):
            if is_never_passed(name):
                found.append(Exposure(name, f"/proc/{pid}/environ, {who}"))
    return found


def refuse_exposed_secrets(backend: str, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`~.local.SandboxSetupError` when a secret is readable (see module doc)."""
    from agentdescent_core.sandbox.local import SandboxSetupError

    found = exposed_secrets(environ)
    if not found:
        return
    names = sorted({e.name for e in found})
    places = "; ".join(f"{e.name} in {e.where}" for e in found[:6])
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    raise SandboxSetupError(
        f"the {backend!r} sandbox cannot keep {', '.join(names)} from candidate code: it is "
        f"readable as {places}{more}. Under {backend!r} a candidate's script runs as you and "
        "can read /proc/<pid>/environ of this process and of every process above it, so "
        "the value cannot be hidden by leaving it out of the child's environment. Use "
        "--evolve-sandbox bwrap or docker (they give the candidate a private /proc), or "
        "start the evolution without the variable (env -u NAME ...) and publish in a "
        "separate step that has it (agentdescent pr)"
    )
