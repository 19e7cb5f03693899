"""publish_pull_request against a real bare git remote and the GitHub test server (real HTTP)."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
from conftest import UserRepo, user_git, write
from github_server import GitHubTestServer, add_bare_remote, evolve

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.github import PR_MARKER, GitHubError, publish_pull_request
from agentdescent_core.ledger import Ledger

TOKEN = "ghs_SeCrEt0123456789abcdefTOKEN"
REPO = "octo/demo"


@pytest.fixture
def remote(user_repo: UserRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    return add_bare_remote(user_repo.path, tmp_path)


def remote_sha(bare: Path, ref: str) -> str | None:
    out = user_git(bare, "for-each-ref", "--format=%(objectname)", ref)
    return out.strip() or None


def publish(user: UserRepo, server: GitHubTestServer, **kwargs: Any):
    return publish_pull_request(user.path, token=TOKEN, api_url=server.api_url, **kwargs)


REPORT = {
    "reward_before": 0.25, "reward_after": 0.75,
    "train": {"tasks": 2, "reward_before": 0.5, "reward_after": 1.0},
    "holdout": {"tasks": 1, "reward_before": 0.0, "reward_after": 0.5},
    "flips": {"fail->pass": ["tests/test_agent.py::test_name"], "pass->fail": []},
    "tasks": [{"nodeid": "tests/test_agent.py::test_name", "before": 0.0, "after": 1.0,
               "holdout": False, "change": "fail->pass"}],
    "calls": 7, "cost_usd": 0.0123,
    "model": {"input_tokens": 1200, "output_tokens": 340},
}


def test_create_then_update_then_close(user_repo: UserRepo, remote: Path):
    before = user_repo.snapshot()
    head = user_repo.head_state()
    others = user_repo.other_refs()
    first = evolve(user_repo.path, ["Greet by first name."])
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        created = publish(user_repo, server, report=REPORT, labels=("agentdescent", "bot"),
                          draft=True)
        assert (created.operation, created.number, created.pushed) == ("created", 1, True)
        assert created.url == f"https://github.test/{REPO}/pull/1"
        assert created.branch == "agentdescent/stable"
        assert created.base == "main"
        assert remote_sha(remote, "refs/heads/agentdescent/stable") == first[-1]
        pull = server.pulls[1]
        assert pull["draft"] is True
        assert pull["labels"] == ["agentdescent", "bot"]
        assert pull["head"]["label"] == "octo:agentdescent/stable"
        assert pull["body"].count(PR_MARKER) == 1
        assert created.body == pull["body"]
        assert set(created.to_json()) == {"operation", "number", "url", "branch", "base",
                                          "pushed", "message", "head_sha"}
        assert created.head_sha == first[-1]
        assert f"agentdescent review --base {user_repo.base} --head {first[-1]}" in pull["body"]
        assert "Greet by first name." in pull["body"]
        assert "0.250 | 0.750" in pull["body"]
        assert "skills/greet/SKILL.md" in pull["body"]
        auth = [r.headers.get("authorization") for r in server.requests]
        assert auth == [f"Bearer {TOKEN}"] * len(server.requests)
        assert {r.headers.get("x-github-api-version") for r in server.requests} == {"2022-11-28"}
        assert {r.headers.get("accept") for r in server.requests} == {
            "application/vnd.github+json"}
        assert [(r.method, r.path) for r in server.requests if r.method != "GET"] == [
            ("POST", f"/repos/{REPO}/pulls"), ("POST", f"/repos/{REPO}/issues/1/labels")]

        # Next run: one more version; the same pull request is updated, none created.
        second = evolve(user_repo.path, ["Thank them."])
        server.requests.clear()
        updated = publish(user_repo, server, report=REPORT)
        assert (updated.operation, updated.number, updated.pushed) == ("updated", 1, True)
        assert len(server.pulls) == 1
        assert not [r for r in server.requests if r.method == "POST" and r.path.endswith("/pulls")]
        body = server.pulls[1]["body"]
        assert "Thank them." in body
        assert f"--head {second[-1]}" in body
        assert "v2" in server.pulls[1]["title"]
        assert remote_sha(remote, "refs/heads/agentdescent/stable") == second[-1]

        # Stable rolled back to the base: nothing to propose, the pull request is closed.
        with Ledger(user_repo.path, FileTree(["skills"])) as ledger:
            ledger.promote(0)
        closed = publish(user_repo, server, report=REPORT)
        assert (closed.operation, closed.number) == ("closed", 1)
        assert server.pulls[1]["state"] == "closed"
        assert len(server.pulls[1]["comments"]) == 1
        assert "identical to the base" in server.pulls[1]["comments"][0]
        assert remote_sha(remote, "refs/heads/agentdescent/stable") == user_repo.base

        again = publish(user_repo, server)
        assert (again.operation, again.number, again.pushed) == ("none", None, False)
        assert "identical" in again.message
        assert again.to_json()["operation"] == "none"
    assert user_repo.snapshot() == before
    assert user_repo.head_state() == head
    assert user_repo.other_refs() == others


def test_nothing_to_propose_when_the_base_already_has_the_change(user_repo: UserRepo,
                                                                 remote: Path):
    evolve(user_repo.path, ["Greet by first name."])
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        assert publish(user_repo, server).operation == "created"
        # The user merges the change by hand (another commit on main), then main moves on.
        text = (user_repo.path / "skills/greet/SKILL.md").read_text() + "Greet by first name.\n"
        user_repo.commit_on_main({"skills/greet/SKILL.md": text, "docs/new.md": "new\n"}, "merge")
        user_git(user_repo.path, "push", "--quiet", "origin", "main")
        outcome = publish(user_repo, server)
    assert outcome.operation == "closed"
    assert "same content in the base" in server.pulls[1]["comments"][0]


def test_enterprise_api_url_under_api_v3(user_repo: UserRepo, remote: Path,
                                         monkeypatch: pytest.MonkeyPatch):
    evolve(user_repo.path, ["Greet by first name."])
    with GitHubTestServer(repository=REPO, token=TOKEN, prefix="/api/v3",
                          default_branch="main") as server:
        assert server.api_url.endswith("/api/v3")
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        outcome = publish_pull_request(user_repo.path)  # base: the default branch, from the API
        assert outcome.operation == "created"
        assert outcome.base == "main"
        # The server answers 404 outside /api/v3, so success means every call used it.
        assert server.requests[0].path == f"/repos/{REPO}"
        assert len(server.requests) >= 3


def test_base_is_fetched_without_touching_other_refs(user_repo: UserRepo, remote: Path,
                                                     tmp_path: Path):
    # Someone else moves main on the remote: the user's clone lacks the new base commit.
    other = tmp_path / "other"
    user_git(tmp_path, "clone", "--quiet", str(remote), str(other))
    write(other / "src/app.py", "print('moved')\n")
    user_git(other, "commit", "--quiet", "-am", "move main")
    user_git(other, "push", "--quiet", "origin", "main")
    moved = user_git(other, "rev-parse", "HEAD")
    evolve(user_repo.path, ["Greet by first name."])
    before = user_repo.snapshot()
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        outcome = publish(user_repo, server, base="main")
        assert outcome.operation == "created"
        assert f"--base {moved}" in server.pulls[1]["body"]
    assert user_repo.snapshot() == before  # no FETCH_HEAD, no refs/remotes/origin/main move
    assert user_git(user_repo.path, "cat-file", "-t", moved) == "commit"


def test_refuses_to_overwrite_a_stable_branch_someone_else_pushed(
        user_repo: UserRepo, remote: Path, tmp_path: Path):
    other = tmp_path / "other"
    user_git(tmp_path, "clone", "--quiet", str(remote), str(other))
    write(other / "skills/greet/SKILL.md", "# Someone else's version\n")
    user_git(other, "commit", "--quiet", "-am", "theirs")
    user_git(other, "push", "--quiet", "origin", "HEAD:refs/heads/agentdescent/stable")
    theirs = user_git(other, "rev-parse", "HEAD")
    evolve(user_repo.path, ["Greet by first name."])
    with GitHubTestServer(repository=REPO, token=TOKEN) as server, \
            pytest.raises(GitHubError, match="someone else pushed") as caught:
        publish(user_repo, server)
    assert "git fetch origin" in str(caught.value)
    assert remote_sha(remote, "refs/heads/agentdescent/stable") == theirs
    assert server.pulls == {}


def test_missing_token_names_github_token(user_repo: UserRepo, remote: Path):
    evolve(user_repo.path, ["x"])
    with pytest.raises(GitHubError, match="GITHUB_TOKEN"):
        publish_pull_request(user_repo.path)


def test_a_path_remote_needs_github_repository(user_repo: UserRepo, remote: Path,
                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("GITHUB_REPOSITORY")
    evolve(user_repo.path, ["x"])
    with pytest.raises(GitHubError, match="set GITHUB_REPOSITORY"):
        publish_pull_request(user_repo.path, token=TOKEN, api_url="http://127.0.0.1:9")


def test_missing_stable_branch_says_run_the_evolution(user_repo: UserRepo, remote: Path):
    with pytest.raises(GitHubError, match="pytest --evolve"):
        publish_pull_request(user_repo.path, token=TOKEN, api_url="http://127.0.0.1:9")


def _chain_text(exc: BaseException) -> str:
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen), repr(vars(seen)), repr(seen.args)]
        seen = seen.__cause__ or seen.__context__
    parts.append("".join(traceback.format_exception(exc)))
    return "\n".join(parts)


ERRORS = [
    pytest.param("POST", r"/pulls$", 403,
                 {"message": "GitHub Actions is not permitted to create or approve pull "
                             "requests."}, {},
                 ["Allow GitHub Actions to create and approve pull requests",
                  "Settings > Actions > General > Workflow permissions",
                  "pull-requests: write"], id="403-actions-may-not-create"),
    pytest.param("POST", r"/pulls$", 403, {"message": "Resource not accessible by integration"},
                 {}, ["pull-requests: write", "contents: write",
                      "Resource not accessible by integration"], id="403-permissions"),
    pytest.param("GET", r"/pulls$", 404, {"message": "Not Found"}, {},
                 ["not found", "token cannot see it", "GITHUB_REPOSITORY", "GITHUB_API_URL"],
                 id="404"),
    pytest.param("POST", r"/pulls$", 422,
                 {"message": "Validation Failed",
                  "errors": [{"resource": "PullRequest", "code": "custom",
                              "message": "No commits between main and agentdescent/stable"}]},
                 {}, ["422", "No commits between main and agentdescent/stable",
                      "adds nothing to the base"], id="422"),
    pytest.param("POST", r"/pulls$", 429, {"message": "secondary rate limit"},
                 {"retry-after": "60"}, ["rate limit", "wait 60 s"], id="429-retry-after"),
    pytest.param("GET", r"/pulls$", 403, {"message": "API rate limit exceeded"},
                 {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "4102444800"},
                 ["rate limit", "resets at 2100-01-01 00:00:00 UTC"], id="403-rate-limit"),
    pytest.param("POST", r"/pulls$", 403,
                 {"message": "You have exceeded a secondary rate limit."}, {},
                 ["rate limit", "wait a few minutes"], id="403-secondary-rate-limit"),
]


@pytest.mark.parametrize(("method", "path", "status", "body", "headers", "expected"), ERRORS)
def test_api_errors_say_what_to_fix_without_the_token(
        user_repo: UserRepo, remote: Path, method: str, path: str, status: int,
        body: dict[str, Any], headers: dict[str, str], expected: list[str]):
    evolve(user_repo.path, ["Greet by first name."])
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        server.fail_next(method, path, status, {**body, "echo": TOKEN}, headers)
        with pytest.raises(GitHubError) as caught:
            publish(user_repo, server, base="main")
    message = str(caught.value)
    for text in expected:
        assert text in message
    assert caught.value.status == status
    assert TOKEN not in _chain_text(caught.value)


def test_bad_token_is_a_401_that_says_to_fix_the_token(user_repo: UserRepo, remote: Path):
    evolve(user_repo.path, ["x"])
    wrong = "ghp_WrongWrongWrong0123456789"
    with GitHubTestServer(repository=REPO, token=TOKEN) as server, \
            pytest.raises(GitHubError) as caught:
        publish_pull_request(user_repo.path, token=wrong, api_url=server.api_url)
    message = str(caught.value)
    assert "401" in message
    assert "GITHUB_TOKEN" in message
    assert "expired" in message
    assert wrong not in _chain_text(caught.value)


def test_unreachable_api_names_github_api_url(user_repo: UserRepo, remote: Path):
    evolve(user_repo.path, ["x"])
    with GitHubTestServer() as server:
        dead = server.api_url
    with pytest.raises(GitHubError, match="GITHUB_API_URL") as caught:
        publish_pull_request(user_repo.path, token=TOKEN, api_url=dead, base="main")
    assert TOKEN not in _chain_text(caught.value)


def test_the_review_command_names_the_roots_and_the_project_directory() -> None:
    from agentdescent_core.github.pr import default_review_command

    assert default_review_command("b" * 7, "h" * 7, None) == \
        "agentdescent review --base bbbbbbb --head hhhhhhh"
    assert default_review_command("b", "h", {"roots": ["skills"], "subdir": ""}) == \
        "agentdescent review --base b --head h skills"
    assert default_review_command(
        "b", "h", {"roots": ["apps/bot/skills", "apps/bot/AGENTS.md"], "subdir": "apps/bot"}
    ) == "cd apps/bot && agentdescent review --base b --head h skills AGENTS.md"
