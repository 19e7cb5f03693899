"""The sticky review comment through the real client and the GitHub test server.

Finding the earlier comment must work past the first page of a busy thread,
a comment by someone else is left alone, and no secret of the environment
reaches the comment even when a failure message quotes one.
"""

from __future__ import annotations

from typing import Any

import pytest
from github_server import GitHubTestServer

from agentdescent_core.github import (
    REVIEW_MARKER,
    GitHubClient,
    publish_review_comment,
    render_review_comment,
    review_status,
)

REPO = "octo/demo"
TOKEN = "ghs_ReviewCommentT0ken0123456789abcdef"
SECRET = "sk-ant-api03-ReviewSecretValue-0123456789"


def review_json(*, ok: bool, failures: tuple[str, ...] = (),
                changed: bool = True) -> dict[str, Any]:
    return {
        "ok": ok, "base": "a" * 40, "head": "b" * 40, "roots": ["skills"],
        "roots_source": "evolve_paths",
        "scope": {"ok": True, "artifact_changed": changed, "changed": ["skills/a.md"],
                  "violations": []},
        "evaluation": {"reward_before": 0.25, "reward_after": 0.75, "p_improvement": 0.99,
                       "p_value": 0.004, "threshold": 0.05, "confidence": 0.95,
                       "accepted": ok, "policy": "betting", "reason": "r",
                       "repeats": {"base": 3, "head": 3}, "sandbox": "local"},
        "tasks": [{"nodeid": "tests/test_a.py::test_x[a|b]", "kind": "train", "before": 0.0,
                   "after": 1.0, "flip": "fail->pass"}],
        "failures": list(failures), "warnings": [],
    }


def test_the_marked_comment_is_found_past_the_first_page_and_edited() -> None:
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        number = server.add_pull(head="pr")["number"]
        with GitHubClient(TOKEN, REPO, api_url=server.api_url) as client:
            for index in range(120):  # a busy thread: ours is on page 2
                client.comment(number, f"comment {index} by a person")
            client.comment(number, f"someone quoting {REVIEW_MARKER}?")  # not at the top
            op, url = publish_review_comment(client, number,
                                             render_review_comment(review_json(ok=True)))
            assert op == "created"
            assert len(server.comments) == 122
            ours = max(server.comments)
            body = render_review_comment(review_json(ok=False, failures=("worse",)))
            op2, url2 = publish_review_comment(client, number, body)
        assert (op2, url2) == ("updated", url)
        assert len(server.comments) == 122
        assert server.comments[ours]["body"] == body
        assert "FAILED" in body
        assert server.comments[ours - 1]["body"] == f"someone quoting {REVIEW_MARKER}?"
        pages = [r.query.get("page") for r in server.requests if r.method == "GET"]
        assert "2" in pages


def test_the_body_has_the_numbers_and_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    data = review_json(ok=False, failures=(f"guard failed: printed {SECRET}",))

    body = render_review_comment(data, command="agentdescent review --base aaa")

    assert body.startswith(REVIEW_MARKER + "\n")
    assert "agentdescent review: FAILED" in body
    assert "| reward | 0.250 | 0.750 |" in body
    assert "P(improvement) 0.99; p = 0.004 vs threshold 0.05; confidence 95.0%" in body
    assert "repeats: base 3, head 3" in body
    assert "| `tests/test_a.py::test_x[a\\|b]` | train | 0.000 | 1.000 | fail->pass |" in body
    assert SECRET not in body
    assert "[REDACTED:ANTHROPIC_API_KEY]" in body
    assert review_status(data) == "failed"
    assert review_status(review_json(ok=False, changed=False)) == "skipped"
