"""``agentdescent pr`` against a real bare git remote and the GitHub test server (real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import UserRepo, user_git, write
from github_server import GitHubTestServer, add_bare_remote, evolve

from pytest_agentdescent.cli import main

TOKEN = "ghs_CliSeCrEt0123456789abcdefTOKEN"
REPO = "octo/demo"


@pytest.fixture
def remote(clean_user_repo: UserRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("GITHUB_API_URL", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.chdir(clean_user_repo.path)
    return add_bare_remote(clean_user_repo.path, tmp_path)


def pr(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["pr", *args], catch_exceptions=False)
    assert TOKEN not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def read_outputs(path: Path) -> dict[str, str]:
    """The ``name=value`` / ``name<<DELIM`` lines of a GITHUB_OUTPUT file."""
    values: dict[str, str] = {}
    lines = iter(path.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body: list[str] = []
            for item in lines:
                if item == delimiter:
                    break
                body.append(item)
            values[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            values[name] = value
    return values


def test_creates_then_updates_one_pull_request(clean_user_repo: UserRepo, remote: Path,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    evolve(clean_user_repo.path, ["Greet by first name."])
    write(clean_user_repo.path / ".agentdescent/report.json",
          json.dumps({"reward_before": 0.25, "reward_after": 0.75, "calls": 3}))
    outputs = tmp_path / "github_output"
    outputs.touch()
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        code, out, _ = pr("--label", "bot", "--label", "agents", "--draft")
        assert code == 0
        assert out == f"created #1 https://github.test/{REPO}/pull/1\n"
        pull = server.pulls[1]
        assert pull["draft"] is True
        assert pull["head"]["ref"] == "agentdescent/stable"
        assert sorted(pull["labels"]) == ["agents", "bot"]
        assert "0.25" in pull["body"]
        assert "0.75" in pull["body"]
        stable = clean_user_repo.git("rev-parse", "agentdescent/stable")
        url = f"https://github.test/{REPO}/pull/1"
        assert read_outputs(outputs) == {
            "pull-request-number": "1", "pull-request-operation": "created",
            "pull-request-url": url, "pull-request-head-sha": stable,
            "pull-request-branch": "agentdescent/stable",
            "pr-number": "1", "pr-operation": "created", "pr-url": url}
        assert user_git(remote, "rev-parse", "agentdescent/stable") == stable

        evolve(clean_user_repo.path, ["Close politely."])
        code, out, _ = pr("--json")
        assert code == 0
        data = json.loads(out)
        assert data["operation"] == "updated"
        assert data["number"] == 1
        assert data["branch"] == "agentdescent/stable"
        assert data["base"] == "main"
        assert data["pushed"] is True
        assert len(server.pulls) == 1  # no duplicate
        assert sorted(server.pulls[1]["labels"]) == ["agentdescent", "agents", "bot"]
        auth = {r.headers.get("authorization") for r in server.requests}
        assert auth == {f"Bearer {TOKEN}"}


def test_closes_when_stable_has_nothing_new_and_enterprise_url(
        clean_user_repo: UserRepo, remote: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evolve(clean_user_repo.path, [], promote=False)  # branches exist, equal to main
    with GitHubTestServer(repository=REPO, token=TOKEN, prefix="/api/v3") as server:
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        server.add_pull(head="agentdescent/stable")
        code, out, _ = pr("--json", "--base", "main")
        assert code == 0
        assert json.loads(out)["operation"] == "closed"
        assert server.pulls[1]["state"] == "closed"
        assert server.requests  # every call went under /api/v3 (else the server 404s)


def test_api_errors_become_messages_and_exit_1(clean_user_repo: UserRepo, remote: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    evolve(clean_user_repo.path, ["Greet by first name."])
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        server.fail_next("POST", r"/pulls$", 403,
                         {"message": "GitHub Actions is not permitted to create or approve "
                                     "pull requests."})
        code, out, err = pr()
        assert code == 1
        assert out == ""
        assert "Error:" in err
        assert "Allow GitHub Actions to create and approve pull requests" in err
        assert not server.pulls


def test_missing_token_names_the_variable(clean_user_repo: UserRepo, remote: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    evolve(clean_user_repo.path, ["Greet by first name."])
    monkeypatch.delenv("GITHUB_TOKEN")
    code, _, err = pr()
    assert code == 1
    assert "GITHUB_TOKEN" in err


def test_branch_prefix_from_the_ini(clean_user_repo: UserRepo, remote: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    evolve(clean_user_repo.path, ["Greet by first name."], prefix="bots/")
    write(clean_user_repo.path / "pytest.ini", "[pytest]\nevolve_branch_prefix = bots/\n")
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        code, _, err = pr("--json")
        assert code == 0, err
        assert server.open_pulls()[0]["head"]["ref"] == "bots/stable"
