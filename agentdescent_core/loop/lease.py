"""One evolution per repository at a time: the repository lease in the run store.

Why: two runs on the same repository would race on ``<prefix>dev`` and on the
state directory (the eval cache, the run store, the report).  The first run
takes a lease in the run store and renews it while it lives; a second run is
refused with the holder's name and when its lease expires, unless the holder
is known dead (it ran on this host and its process is gone), in which case it
is taken over at once.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid

from agentdescent_core.errors import AgentDescentError, RunRefused as RunRefused
from agentdescent_core.loop.durable import LeaseHeld, SqliteRunStore, holder_alive, holder_id

REPOSITORY_LEASE = "repository"


def holder_name() -> str:
    """``agentdescent-<token>:<pid>@<host>``: unique per run, and a dead holder is recognisable."""
    return holder_id(f"agentdescent-{uuid.uuid4().hex[:8]}")


def holder_is_dead(holder: str) -> bool:
    """True only when the holder ran on this host and its process is gone."""
    return holder_alive(holder) is False


class RepositoryLease:
    """One evolution per repository at a time, with a heartbeat while it runs.

    The lease lives in the run store.  A holder that died on this host (its
    process is gone) is taken over at once; one on another host, or alive,
    makes :meth:`acquire` raise :class:`RunRefused` naming it and when its lease
    expires.  The heartbeat renews the lease every quarter of ``ttl``, so a
    killed run frees the repository ``ttl`` seconds later at the latest.
    """

    def __init__(self, store: SqliteRunStore, *, holder: str | None = None,
                 ttl: float = 60.0) -> None:
        self.store = store
        self.holder = holder or holder_name()
        self.ttl = ttl
        self.took_over: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        try:
            self.store.acquire_lease(REPOSITORY_LEASE, self.holder, self.ttl)
        except LeaseHeld as held:
            if not holder_is_dead(held.holder):
                raise RunRefused(
                    f"another agentdescent run holds this repository: {held.holder} "
                    f"(name:pid@host), its lease expires at "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(held.expires_at))} "
                    f"(in {max(0, math.ceil(held.expires_at - time.time()))} s); wait for it "
                    "to finish, or stop it by creating .agentdescent/STOP"
                ) from None
            self.store.break_lease(REPOSITORY_LEASE)
            self.store.acquire_lease(REPOSITORY_LEASE, self.holder, self.ttl)
            self.took_over = held.holder
        self._thread = threading.Thread(target=self._beat, name="agentdescent-lease",
                                        daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self.store.renew_lease(REPOSITORY_LEASE, self.holder, self.ttl)
            except AgentDescentError:
                return  # lost or store closed: the kernel's own lease check will tell

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(AgentDescentError):
            self.store.release_lease(REPOSITORY_LEASE, self.holder)
