"""Small local HTTP servers that speak the model providers' wire formats.

The model tests never mock the ``anthropic`` / ``openai`` SDKs: they point the real
clients at one of these servers (``base_url=`` or ``ANTHROPIC_BASE_URL`` /
``OPENAI_BASE_URL``) and then assert on what the server actually received.  Each
server is a real ``http.server`` on ``127.0.0.1:0`` in a background thread.

Answers are scripted per test with :meth:`WireServer.script`; every request
consumes the next item:

* ``"some text"`` (any other string) — a normal answer with that text and usage;
* ``Answer(text, input_tokens=.., output_tokens=..)`` — same, with chosen usage;
* ``(status, headers, body)`` — an error (or any raw reply): ``body`` may be a
  dict (sent as JSON), a str/bytes (sent raw) or None (a provider-shaped error);
* ``"hang"`` — never answers until the client gives up (or the server closes);
* ``"truncated"`` — announces a longer body than it sends, then drops the
  connection;
* a callable ``(Received) -> item`` — decides from the request.

When the script runs out the ``then=`` item is repeated; without one the server
answers 500 with ``x-should-retry: false`` and a message saying the script is
exhausted, so a test that makes more calls than it meant to fails loudly.

    with start_anthropic_server() as server:
        server.script(["429-free answer"])
        client = anthropic.Anthropic(api_key="k", base_url=server.base_url)
        ...
        assert server.requests[0].body["model"] == "claude-haiku-4-5"
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "Answer",
    "Received",
    "WireServer",
    "serving",
    "start_anthropic_server",
    "start_openai_server",
]

Flavour = Literal["anthropic", "openai"]


@dataclass(frozen=True)
class Answer:
    """A successful model answer with explicit token usage."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None  # reported model name; defaults to the requested one


@dataclass(frozen=True)
class Received:
    """One request the server received (all of them are kept, errors included)."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # the parsed JSON body, or the raw text when it was not JSON
    flavour: Flavour

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def system(self) -> str:
        """The system prompt, whichever way the provider format carries it."""
        if not isinstance(self.body, dict):
            return ""
        if self.flavour == "anthropic":
            return _content_text(self.body.get("system", ""))
        return "\n".join(
            _content_text(m.get("content", ""))
            for m in self.body.get("messages", [])
            if isinstance(m, dict) and m.get("role") in ("system", "developer")
        )

    @property
    def user(self) -> str:
        """The text of every user message, joined."""
        if not isinstance(self.body, dict):
            return ""
        return "\n".join(
            _content_text(m.get("content", ""))
            for m in self.body.get("messages", [])
            if isinstance(m, dict) and m.get("role") == "user"
        )

    @property
    def text(self) -> str:
        """System and user text together: handy for "X appears nowhere" checks."""
        return self.system + "\n" + self.user


ScriptItem = str | Answer | tuple[int, dict[str, str], Any] | Callable[[Received], Any]

_EXHAUSTED = "script exhausted"


def _content_text(content: Any) -> str:
    """Flatten a message content (a string or a list of content blocks) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return ""


def _count_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: whitespace-separated words."""
    return max(1, len(text.split()))


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class WireServer:
    """A scripted model endpoint; use as a context manager (or call :meth:`close`).

    ``base_url`` is what the SDK (or its environment variable) should be given:
    ``http://127.0.0.1:PORT`` for Anthropic, ``http://127.0.0.1:PORT/v1`` for OpenAI
    (the OpenAI SDK's base URL includes the ``/v1`` prefix).
    """

    def __init__(self, flavour: Flavour, *, hang_seconds: float = 30.0) -> None:
        self.flavour: Flavour = flavour
        self.hang_seconds = hang_seconds
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._script: list[Any] = []
        self._then: Any = None
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # so close() returns promptly
            name=f"{flavour}-wire-server",
            daemon=True,
        )
        self._thread.start()
        port = self._httpd.server_address[1]
        self.root_url = f"http://127.0.0.1:{port}"
        self.base_url = self.root_url if flavour == "anthropic" else self.root_url + "/v1"
        self.endpoint = "/v1/messages" if flavour == "anthropic" else "/v1/chat/completions"

    # -- scripting -------------------------------------------------------------------

    def script(self, items: Iterable[ScriptItem], *, then: ScriptItem | None = None) -> WireServer:
        """Queue the replies for the next requests (appends to what is left)."""
        with self._lock:
            self._script.extend(items)
            if then is not None:
                self._then = then
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._script)

    @property
    def calls(self) -> list[Received]:
        """The requests that reached the model endpoint (other paths excluded)."""
        with self._lock:
            return [r for r in self.requests if r.path == self.endpoint]

    def _next_item(self, received: Received) -> Any:
        with self._lock:
            item = self._script.pop(0) if self._script else self._then
        if item is None:
            msg = f"wire server: {_EXHAUSTED}; script() more replies or pass then="
            return (500, {"x-should-retry": "false"}, self._error_body(500, msg))
        if callable(item) and not isinstance(item, (str, Answer, tuple)):
            return item(received)
        return item

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> WireServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reply bodies ----------------------------------------------------------------

    def _success_body(self, received: Received, answer: Answer) -> dict[str, Any]:
        body = received.body if isinstance(received.body, dict) else {}
        model = answer.model or str(body.get("model", "unknown-model"))
        n_in = answer.input_tokens
        if n_in is None:
            n_in = _count_tokens(received.text)
        n_out = answer.output_tokens
        if n_out is None:
            n_out = _count_tokens(answer.text)
        serial = len(self.requests)
        if self.flavour == "anthropic":
            return {
                "id": f"msg_wire{serial:06d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": answer.text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": n_in, "output_tokens": n_out},
            }
        return {
            "id": f"chatcmpl-wire{serial:06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": n_in,
                "completion_tokens": n_out,
                "total_tokens": n_in + n_out,
            },
        }

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        if self.flavour == "anthropic":
            kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
            return {"type": "error", "error": {"type": kind, "message": message}}
        kind = "rate_limit_exceeded" if status == 429 else "server_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _make_handler(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output clean."""

        def do_GET(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            received = Received(
                method=self.command,
                path=self.path.split("?", 1)[0],
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                flavour=server.flavour,
            )
            with server._lock:
                server.requests.append(received)
            if self.command != "POST" or received.path != server.endpoint:
                msg = f"wire server: no route {self.command} {received.path}"
                self._send(404, {"x-should-retry": "false"}, server._error_body(404, msg))
                return
            if isinstance(body, dict) and body.get("stream"):
                msg = "wire server: streaming is not supported; call without stream=True"
                self._send(400, {"x-should-retry": "false"}, server._error_body(400, msg))
                return
            self._reply(server._next_item(received), received)

        def _reply(self, item: Any, received: Received) -> None:
            if item == "hang":
                server._closing.wait(server.hang_seconds)
                self.close_connection = True
                return
            if item == "truncated":
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "4096")
                self.end_headers()
                self.wfile.write(b'{"id": "msg_cut", "type": "mess')
                self.wfile.flush()
                self.close_connection = True
                return
            if isinstance(item, tuple):
                status, headers, payload = item
                if payload is None:
                    payload = server._error_body(status, f"wire server: scripted error {status}")
                self._send(status, headers, payload)
                return
            answer = item if isinstance(item, Answer) else Answer(str(item))
            self._send(200, {}, server._success_body(received, answer))

        def _send(self, status: int, headers: dict[str, str], payload: Any) -> None:
            if isinstance(payload, (dict, list)):
                data = json.dumps(payload).encode()
                ctype = "application/json"
            elif isinstance(payload, bytes):
                data, ctype = payload, "application/json"
            else:
                data, ctype = str(payload).encode(), "application/json"
            self.send_response(status)
            names = {k.lower() for k in headers}
            if "content-type" not in names:
                self.send_header("content-type", ctype)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

    return Handler


def start_anthropic_server(*, hang_seconds: float = 30.0) -> WireServer:
    """A server speaking ``POST /v1/messages`` (the Anthropic Messages API)."""
    return WireServer("anthropic", hang_seconds=hang_seconds)


def start_openai_server(*, hang_seconds: float = 30.0) -> WireServer:
    """A server speaking ``POST /v1/chat/completions`` (OpenAI Chat Completions)."""
    return WireServer("openai", hang_seconds=hang_seconds)


@contextmanager
def serving(flavour: Flavour, items: Sequence[ScriptItem] = (), **kw: Any) -> Iterator[WireServer]:
    """``with serving("openai", ["answer"]) as server:`` — start, script, close."""
    server = WireServer(flavour, **kw)
    try:
        server.script(items)
        yield server
    finally:
        server.close()
