"""A GitHub REST API stand-in for tests: a real HTTP server with an in-memory repository.

The GitHub tests never mock httpx2: they point the real client at this server
(``api_url=server.api_url`` or ``GITHUB_API_URL``) and then assert on what it
received and on the state it holds.  API (kept small on purpose)::

    with GitHubTestServer(repository="octo/demo", token="t0k3n") as server:
        server.api_url            # http://127.0.0.1:PORT (+ prefix, e.g. "/api/v3")
        server.requests           # every request: Request(method, path, query, headers, json)
        server.pulls              # {number: pull dict}; "comments" and "labels" lists inside
        server.default_branch     # "main" unless given
        server.fail_next("POST", r"/pulls$", 403, {"message": "..."}, {"retry-after": "30"})

- ``GitHubTestServer(repository="octo/demo", token=None, default_branch="main",
  prefix="")``: ``token`` set -> requests without ``Authorization: Bearer <token>``
  get 401 ``Bad credentials``; ``prefix="/api/v3"`` serves the API under that
  path, as GitHub Enterprise Server does (anything outside it is 404).
- Endpoints: ``GET /repos/{o}/{n}``; ``GET/POST /repos/{o}/{n}/pulls`` (``state``,
  ``head`` filters; creating a second open pull for the same head is a 422
  "A pull request already exists"); ``GET/PATCH /repos/{o}/{n}/pulls/{num}``
  (``title``, ``body``, ``state``, ``base``); ``POST
  /repos/{o}/{n}/issues/{num}/comments`` and ``GET`` of it (``page``, ``per_page``);
  ``PATCH /repos/{o}/{n}/issues/comments/{id}``; ``POST /repos/{o}/{n}/issues/{num}/labels``.
  ``server.comments`` holds every comment by id (``id``, ``issue``, ``body``,
  ``html_url``, ``user``); the pull's ``"comments"`` list holds their bodies.
  Another repository is 404 ``Not Found``.
- ``fail_next(method, path_regex, status, body=None, headers=None)``: the next
  matching request (path without the prefix, regex searched) gets that answer
  instead; each injected failure is used once.  ``body`` None sends a GitHub-
  shaped ``{"message": ...}``.

Two git helpers for tests that publish (real repositories, no fakes):
``add_bare_remote(user_path, tmp_path)`` makes a bare repository, adds it as
``origin`` of the user's repository and pushes ``main`` there;
``evolve(user_path, lines, promote=True)`` commits one ledger version per line
(appended to ``skills/greet/SKILL.md``, with evidence and a rationale) on
``agentdescent/dev`` and promotes the head to ``agentdescent/stable``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from conftest import user_git

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.ledger import Evidence, Ledger

__all__ = ["GitHubTestServer", "Request", "add_bare_remote", "evolve"]


@dataclass(frozen=True)
class Request:
    """One request the server received (failed and injected ones included)."""

    method: str
    path: str  # without the prefix and the query string
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    json: Any


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern[str]
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class GitHubTestServer:
    def __init__(self, *, repository: str = "octo/demo", token: str | None = None,
                 default_branch: str = "main", prefix: str = "") -> None:
        self.repository = repository
        self.token = token
        self.default_branch = default_branch
        self.prefix = prefix.rstrip("/")
        self.requests: list[Request] = []
        self.pulls: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}
        self._next_comment = 9001
        self._failures: list[_Failure] = []
        self._next_number = 1
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> GitHubTestServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                server._dispatch(self)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        assert self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    @property
    def api_url(self) -> str:
        assert self._httpd is not None, "use the server as a context manager"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.prefix}"

    # ------------------------------------------------------------ test controls

    def fail_next(self, method: str, path_regex: str, status: int, body: Any = None,
                  headers: dict[str, str] | None = None) -> None:
        with self._lock:
            self._failures.append(_Failure(method.upper(), re.compile(path_regex), status,
                                           body, dict(headers or {})))

    def add_pull(self, *, head: str, base: str | None = None, title: str = "t", body: str = "",
                 state: str = "open") -> dict[str, Any]:
        """Put a pull request in the model (as if someone opened it)."""
        with self._lock:
            return self._new_pull(title=title, head=head, base=base or self.default_branch,
                                  body=body, draft=False, state=state)

    def open_pulls(self) -> list[dict[str, Any]]:
        return [p for p in self.pulls.values() if p["state"] == "open"]

    # ------------------------------------------------------------ internals

    def _new_pull(self, *, title: str, head: str, base: str, body: str, draft: bool,
                  state: str = "open") -> dict[str, Any]:
        number = self._next_number
        self._next_number += 1
        owner = self.repository.split("/")[0]
        label, _, ref = head.rpartition(":")
        pull = {
            "number": number, "state": state, "title": title, "body": body, "draft": draft,
            "head": {"ref": ref, "label": f"{label or owner}:{ref}"},
            "base": {"ref": base},
            "html_url": f"https://github.test/{self.repository}/pull/{number}",
            "comments": [], "labels": [],
        }
        self.pulls[number] = pull
        return pull

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        path = parts.path
        inside = not self.prefix or path == self.prefix or path.startswith(self.prefix + "/")
        if inside:
            path = path[len(self.prefix):] or "/"
        request = Request(handler.command, path,
                          {k: v[-1] for k, v in parse_qs(parts.query).items()},
                          {k.lower(): v for k, v in handler.headers.items()}, payload)
        with self._lock:
            self.requests.append(request)
            status, body, headers = self._answer(request, inside)
        data = b"" if body is None else json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json; charset=utf-8")
        handler.send_header("content-length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, req: Request, inside: bool) -> tuple[int, Any, dict[str, str]]:
        for failure in self._failures:
            if failure.method == req.method and failure.pattern.search(req.path):
                self._failures.remove(failure)
                body = failure.body if failure.body is not None else {
                    "message": f"injected {failure.status}"}
                return failure.status, body, failure.headers
        not_found: tuple[int, Any, dict[str, str]] = (404, {"message": "Not Found"}, {})
        if not inside:
            return not_found
        if self.token is not None and req.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"message": "Bad credentials"}, {}
        base = f"/repos/{self.repository}"
        if not (req.path == base or req.path.startswith(base + "/")):
            return not_found
        rest = req.path[len(base):]
        payload = req.json if isinstance(req.json, dict) else {}
        if rest == "" and req.method == "GET":
            return 200, {"full_name": self.repository,
                         "default_branch": self.default_branch}, {}
        if rest == "/pulls" and req.method == "GET":
            state, head = req.query.get("state", "open"), req.query.get("head")
            found = [self._public(p) for p in self.pulls.values()
                     if state in ("all", p["state"]) and head in (None, p["head"]["label"])]
            return 200, found, {}
        if rest == "/pulls" and req.method == "POST":
            head = str(payload.get("head", ""))
            label = head if ":" in head else f"{self.repository.split('/')[0]}:{head}"
            if any(p["head"]["label"] == label for p in self.open_pulls()):
                return 422, {"message": "Validation Failed", "errors": [
                    {"resource": "PullRequest", "code": "custom",
                     "message": f"A pull request already exists for {label}."}]}, {}
            new = self._new_pull(title=str(payload.get("title", "")), head=label,
                                 base=str(payload.get("base", "")),
                                 body=str(payload.get("body", "")),
                                 draft=bool(payload.get("draft", False)))
            return 201, self._public(new), {}
        edit = re.fullmatch(r"/issues/comments/(\d+)", rest)
        if edit is not None:
            record = self.comments.get(int(edit.group(1)))
            if record is None:
                return not_found
            if req.method == "PATCH":
                record["body"] = str(payload.get("body", ""))
                self.pulls[record["issue"]]["comments"][record["index"]] = record["body"]
            if req.method in ("GET", "PATCH"):
                return 200, self._public_comment(record), {}
            return not_found
        match = re.fullmatch(r"/(pulls|issues)/(\d+)(/comments|/labels)?", rest)
        pull = self.pulls.get(int(match.group(2))) if match else None
        if match is None or pull is None:
            return not_found
        kind, extra = match.group(1), match.group(3)
        if kind == "pulls" and extra is None and req.method == "GET":
            return 200, self._public(pull), {}
        if kind == "pulls" and extra is None and req.method == "PATCH":
            for key in ("title", "body", "state"):
                if key in payload:
                    pull[key] = payload[key]
            if "base" in payload:
                pull["base"] = {"ref": payload["base"]}
            return 200, self._public(pull), {}
        if kind == "issues" and extra == "/comments" and req.method == "POST":
            pull["comments"].append(str(payload.get("body", "")))
            cid = self._next_comment
            self._next_comment += 1
            self.comments[cid] = {
                "id": cid, "issue": pull["number"], "index": len(pull["comments"]) - 1,
                "body": pull["comments"][-1],
                "html_url": f"{pull['html_url']}#issuecomment-{cid}",
                "user": {"login": "github-actions[bot]", "type": "Bot"}}
            return 201, self._public_comment(self.comments[cid]), {}
        if kind == "issues" and extra == "/comments" and req.method == "GET":
            per_page = max(1, min(100, int(req.query.get("per_page", "30"))))
            page = max(1, int(req.query.get("page", "1")))
            mine = [self._public_comment(c) for c in self.comments.values()
                    if c["issue"] == pull["number"]]
            return 200, mine[(page - 1) * per_page: page * per_page], {}
        if kind == "issues" and extra == "/labels" and req.method == "POST":
            for name in payload.get("labels", []):
                if name not in pull["labels"]:
                    pull["labels"].append(name)
            return 200, [{"name": n} for n in pull["labels"]], {}
        return not_found

    @staticmethod
    def _public_comment(record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if k not in ("issue", "index")}

    @staticmethod
    def _public(pull: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in pull.items() if k not in ("comments", "labels")}
        out["labels"] = [{"name": n} for n in pull["labels"]]
        return out


# ---------------------------------------------------------------------- git helpers


def add_bare_remote(user_path: Path, tmp_path: Path, name: str = "remote.git") -> Path:
    """A bare repository at ``tmp_path / name``, ``origin`` of ``user_path``, holding ``main``."""
    bare = tmp_path / name
    user_git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    user_git(user_path, "remote", "add", "origin", str(bare))
    user_git(user_path, "push", "--quiet", "origin", "main")
    return bare


def evolve(user_path: Path, lines: list[str], *, promote: bool = True,
           prefix: str = "agentdescent/") -> list[str]:
    """Commit one ledger version per line and promote the dev head; the new commit shas."""
    shas: list[str] = []
    with Ledger(user_path, FileTree(["skills", "AGENTS.md"]), prefix=prefix) as ledger:
        ledger.ensure_branches("main")
        for line in lines:
            head = ledger.head("dev")
            text = ledger.read_state(head).get("skills/greet/SKILL.md", "")
            version = ledger.version_of(head)
            result = ledger.commit(
                Diff({"skills/greet/SKILL.md": text + line + "\n"},
                     rationale=f"Add: {line}\n\nThe failing tests wanted {line!r}.",
                     author=f"worker-{version % 2}"),
                evidence=Evidence(reward_before=0.25 + 0.1 * version,
                                  reward_after=0.35 + 0.1 * version, p_improvement=0.97),
            )
            shas.append(result.sha)
        if promote:
            ledger.promote()
    return shas
