"""Counting what goes over the wire: the requests a model endpoint actually received.

A run's report must say how many requests the model received, and that is
not the number of answers the client handed back: the SDKs retry a 429 or a
500 on their own (each retry is a request the server saw and may bill), a
body that is not a valid answer still was a request, and a replayed answer
from the LLM cache was never sent at all.  So the count is taken where the
bytes leave, not where the answer arrives.

:class:`WireMeter` builds the ``httpx2`` client the SDK sends through (the
SDK's own default client, so its timeouts, limits and keep-alive options
stay) and counts one request each time the transport finished sending a
request's body, which it learns from the transport's ``trace`` callback.  A
connection that was refused or never opened is not counted: nothing reached
the server.  A request whose answer never came (a timeout, a dropped
connection) is counted: the server had it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: The trace events of httpcore around writing a request: ``.started`` carries the
#: request, ``.complete`` says its whole body was written to the socket (the prefix is
#: ``http11`` or ``http2``).
_STARTED = ".send_request_headers.started"
_SENT = ".send_request_body.complete"

Trace = Callable[[str, Any], Any]


class WireMeter:
    """A thread-safe count of the requests sent to one endpoint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = 0

    @property
    def sent(self) -> int:
        """Requests written to the endpoint so far, retries and failed answers included."""
        with self._lock:
            return self._sent

    def count(self) -> None:
        """Count one request (for a backend with no HTTP of its own: a function call)."""
        with self._lock:
            self._sent += 1

    def http_client(self, sdk: Any) -> Any:
        """The SDK's default ``httpx2`` client with this meter on every request.

        ``sdk`` is the ``anthropic`` or ``openai`` module; both export a
        ``DefaultHttpxClient`` that keeps the SDK's own defaults.
        """
        return sdk.DefaultHttpxClient(event_hooks={"request": [self._watch]})

    def _watch(self, request: Any) -> None:
        """The request hook: chain a trace callback that counts the finished send."""
        previous: Trace | None = request.extensions.get("trace")
        # An HTTPS proxy's CONNECT shares the request's trace: it is not a model request.
        tunnel = [False]

        def trace(event: str, info: Any) -> Any:
            if event.endswith(_STARTED):
                sent = info.get("request") if isinstance(info, dict) else None
                tunnel[0] = getattr(sent, "method", b"") == b"CONNECT"
            elif event.endswith(_SENT) and not tunnel[0]:
                self.count()
            if previous is not None:
                return previous(event, info)
            return None

        request.extensions["trace"] = trace
