"""A small client for the few GitHub REST calls a pull request (and its review comment) needs.

Speaks REST v3 over ``httpx2`` with the headers GitHub documents
(``Authorization: Bearer``, ``Accept: application/vnd.github+json``,
``X-GitHub-Api-Version: 2022-11-28``).  The base URL is ``https://api.github.com``
or, for GitHub Enterprise Server, ``https://HOST/api/v3`` (what Actions puts in
``GITHUB_API_URL``).

Every failure becomes a :class:`GitHubError` that says what to fix: a bad token
(401), the repository setting that stops Actions from opening pull requests,
missing permissions (403), a repository the token cannot see (404), GitHub's
validation message (422), and rate limits with the time they reset.  The token
is held privately: it is not in the client's repr, not in any message (each is
scrubbed), and HTTP exceptions are never chained to ours because the request
they carry holds the ``Authorization`` header.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import httpx2

from agentdescent_core.github.errors import GitHubError, scrub

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
_ACTIONS_MAY_NOT = "not permitted to create or approve pull requests"


class GitHubClient:
    """REST calls on one repository (``owner/name``) with one token."""

    def __init__(self, token: str, repository: str, *, api_url: str = DEFAULT_API_URL,
                 timeout: float = 30.0) -> None:
        if not token or not token.strip():
            raise GitHubError(
                "no GitHub token: set GITHUB_TOKEN (in Actions: "
                "env: GITHUB_TOKEN: ${{ github.token }})"
            )
        if repository.count("/") != 1 or not all(repository.split("/")):
            raise GitHubError(
                f"repository {repository!r} is not of the form OWNER/NAME; fix "
                "GITHUB_REPOSITORY (or --repository)"
            )
        self.repository = repository
        self.api_url = api_url.rstrip("/")
        self.__token = token.strip()
        self._http = httpx2.Client(
            base_url=self.api_url,
            timeout=timeout,
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": "agentdescent",
            },
        )

    def __repr__(self) -> str:
        return f"GitHubClient({self.repository!r}, api_url={self.api_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ calls

    def default_branch(self) -> str:
        data = self._call("GET", f"/repos/{self.repository}", what="read the repository")
        branch = data.get("default_branch") if isinstance(data, Mapping) else None
        if not isinstance(branch, str) or not branch:
            raise GitHubError(
                f"GitHub did not say which branch is {self.repository}'s default; pass --base"
            )
        return branch

    def open_pulls(self, head: str) -> list[dict[str, Any]]:
        """Open pull requests whose head is ``owner:branch``."""
        data = self._call("GET", f"/repos/{self.repository}/pulls",
                          params={"state": "open", "head": head, "per_page": "100"},
                          what="list pull requests")
        return [dict(p) for p in data] if isinstance(data, list) else []

    def create_pull(self, *, title: str, head: str, base: str, body: str, draft: bool
                    ) -> dict[str, Any]:
        return self._object(self._call(
            "POST", f"/repos/{self.repository}/pulls",
            json={"title": title, "head": head, "base": base, "body": body, "draft": draft},
            what=f"create a pull request from {head} into {base}"))

    def update_pull(self, number: int, **fields: object) -> dict[str, Any]:
        return self._object(self._call("PATCH", f"/repos/{self.repository}/pulls/{number}",
                                       json=dict(fields), what=f"update pull request #{number}"))

    def comment(self, number: int, body: str) -> dict[str, Any]:
        return self._object(self._call(
            "POST", f"/repos/{self.repository}/issues/{number}/comments", json={"body": body},
            what=f"comment on pull request #{number}"))

    def issue_comments(self, number: int) -> list[dict[str, Any]]:
        """Every comment on issue or pull request ``number``, oldest first (all pages)."""
        found: list[dict[str, Any]] = []
        for page in range(1, 101):  # 10,000 comments; a thread longer than that is not ours
            data = self._call("GET", f"/repos/{self.repository}/issues/{number}/comments",
                              params={"per_page": "100", "page": str(page)},
                              what=f"list the comments of pull request #{number}")
            batch = [dict(c) for c in data if isinstance(c, Mapping)] \
                if isinstance(data, list) else []
            found += batch
            if len(batch) < 100:
                break
        return found

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        """Replace the body of the issue comment ``comment_id``."""
        return self._object(self._call(
            "PATCH", f"/repos/{self.repository}/issues/comments/{comment_id}",
            json={"body": body}, what=f"edit comment {comment_id}"))

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        if labels:
            self._call("POST", f"/repos/{self.repository}/issues/{number}/labels",
                       json={"labels": list(labels)}, what=f"label pull request #{number}")

    # ------------------------------------------------------------ internals

    @staticmethod
    def _object(data: object) -> dict[str, Any]:
        return dict(data) if isinstance(data, Mapping) else {}

    def _call(self, method: str, path: str, *, what: str, json: object = None,
              params: Mapping[str, str] | None = None) -> Any:
        failure: str | None = None
        response: httpx2.Response | None = None
        try:
            response = self._http.request(
                method, path, json=json, params=params,
                headers={"Authorization": f"Bearer {self.__token}"},
            )
        except httpx2.TimeoutException:
            failure = (f"GitHub at {self.api_url} did not answer in time while trying to {what}; "
                       "try again, or check GITHUB_API_URL and the network")
        except httpx2.HTTPError as exc:
            failure = (f"could not reach GitHub at {self.api_url} to {what} "
                       f"({type(exc).__name__}: {exc}); check GITHUB_API_URL (GitHub Enterprise: "
                       "https://HOST/api/v3) and the network")
        # Raised here, outside the except block, so no httpx2 exception is chained.
        if failure is not None:
            raise GitHubError(scrub(failure, self.__token))
        assert response is not None
        if response.status_code < 400:
            if response.status_code == 204 or not response.content:
                return None
            try:
                return response.json()
            except ValueError:
                raise GitHubError(
                    f"GitHub at {self.api_url} answered {what!r} with something that is not "
                    "JSON; check GITHUB_API_URL points at the REST API (Enterprise: "
                    "https://HOST/api/v3)"
                ) from None
        raise GitHubError(scrub(self._explain(response, what), self.__token),
                          status=response.status_code)

    def _explain(self, response: httpx2.Response, what: str) -> str:
        status = response.status_code
        message, details = _error_text(response)
        said = f" (GitHub said: {message}{details})" if message else ""
        limit = _rate_limit(response)
        if limit is None and (status == 429 or (status == 403 and "rate limit" in message.lower())):
            limit = "wait a few minutes before trying again, and run less often"
        if limit is not None and status in (403, 429):
            return f"GitHub's API rate limit stopped us from trying to {what}{said}; {limit}"
        if status == 401:
            return (f"GitHub rejected the token (401{': ' + message if message else ''}) while "
                    f"trying to {what}: it is wrong, revoked or expired. Set GITHUB_TOKEN to a "
                    "valid token (in Actions: ${{ github.token }} or a secret)")
        if status == 403 and _ACTIONS_MAY_NOT in message:
            return (f"GitHub Actions may not open pull requests in {self.repository}{said}. "
                    "Allow it in the repository (or organisation) settings: Settings > Actions > "
                    "General > Workflow permissions > 'Allow GitHub Actions to create and "
                    "approve pull requests', and give the workflow `permissions: "
                    "pull-requests: write` (plus `contents: write` to push) — or use a "
                    "personal access token instead of GITHUB_TOKEN")
        if status == 403:
            return (f"the token may not {what} in {self.repository}{said}. Give it write access "
                    "to pull requests and contents: in a workflow, `permissions: contents: "
                    "write` and `pull-requests: write`; for a fine-grained token, 'Pull "
                    "requests' and 'Contents' set to 'Read and write'")
        if status == 404:
            return (f"repository {self.repository} was not found at {self.api_url}, or the "
                    f"token cannot see it (trying to {what}){said}. Check GITHUB_REPOSITORY "
                    "(or the remote URL), GITHUB_API_URL for GitHub Enterprise, and that the "
                    "token has access to this repository")
        if status == 422:
            hint = ""
            lowered = (message + details).lower()
            if "no commits between" in lowered:
                hint = "; the head branch adds nothing to the base, so there is nothing to review"
            elif "base" in lowered and "invalid" in lowered:
                hint = "; the base branch does not exist on GitHub: pass an existing --base"
            elif "already exists" in lowered:
                hint = "; close the other pull request for this branch or let this one be updated"
            return f"GitHub refused to {what} (422 validation failed){said}{hint}"
        if status >= 500:
            return (f"GitHub had an internal error ({status}) while trying to {what}{said}; "
                    "try again in a few minutes")
        return f"GitHub answered {status} while trying to {what}{said}"


def _error_text(response: httpx2.Response) -> tuple[str, str]:
    """GitHub's ``message`` and the ``errors`` details (as '; ...' text), both possibly empty."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:200], ""
    if not isinstance(data, Mapping):
        return "", ""
    message = str(data.get("message") or "")
    parts: list[str] = []
    for item in data.get("errors") or []:
        if isinstance(item, Mapping):
            text = item.get("message") or " ".join(
                str(item[k]) for k in ("resource", "field", "code") if item.get(k))
            if text:
                parts.append(str(text))
        elif item:
            parts.append(str(item))
    return message, ("; " + "; ".join(parts)) if parts else ""


def _rate_limit(response: httpx2.Response) -> str | None:
    """When the answer is a rate limit: when to try again; else None."""
    headers = response.headers
    retry_after = headers.get("retry-after", "")
    if retry_after.strip().isdigit():
        return (f"wait {int(retry_after)} s (retry-after) before trying again, and run less "
                "often or with fewer parallel jobs")
    if headers.get("x-ratelimit-remaining", "").strip() == "0":
        reset = headers.get("x-ratelimit-reset", "").strip()
        if reset.isdigit():
            when = datetime.fromtimestamp(int(reset), tz=timezone.utc)
            wait = max(0, int(int(reset) - time.time()))
            return (f"the limit resets at {when.strftime('%Y-%m-%d %H:%M:%S UTC')} "
                    f"(in {wait} s); try again then")
        return "the limit resets within the hour; try again later"
    return None
