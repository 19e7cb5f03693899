"""``pytest --evolve skills --evolve-pr``: the run ends by pushing stable and opening its PR.

Real parts end to end: the agent repository of test_session_runs with a bare
git remote as ``origin``, and the GitHub test server answering the REST calls.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from github_server import GitHubTestServer
from sandbox_support import require_backend
from test_session_runs import evolve, explain, ledger_refs, make_agent_repo, report_of

from agentdescent_core.github import PR_MARKER

pytestmark = pytest.mark.slow

TOKEN = "ghs_evolvePrSecretToken123"


def test_evolve_pr_pushes_stable_and_opens_then_updates_one_pull_request(
        tmp_path: Path) -> None:
    require_backend("bwrap")
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", str(remote)], check=True)
    subprocess.run(["git", "-C", str(repo), "push", "--quiet", "origin", "main"], check=True)
    outputs = tmp_path / "github_output"
    outputs.write_text("")

    with GitHubTestServer(repository="octo/bot", token=TOKEN) as server:
        env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": server.api_url,
               "GITHUB_REPOSITORY": "octo/bot", "GITHUB_OUTPUT": str(outputs)}
        # GITHUB_TOKEN in the environment refuses --evolve-sandbox local (a candidate could
        # read it from /proc), so a run that publishes evolves under bwrap
        result = evolve(repo, "--evolve-pr", "--evolve-sandbox", "bwrap", env=env)

        assert result.returncode == 0, explain(result)
        assert "pull request: created" in result.stdout
        assert TOKEN not in result.stdout + result.stderr
        pulls = server.open_pulls()
        assert len(pulls) == 1
        pull = pulls[0]
        assert pull["head"]["ref"] == "agentdescent/stable"
        assert PR_MARKER in pull["body"]
        stable_sha = ledger_refs(repo)["refs/heads/agentdescent/stable"]
        assert f"--head {stable_sha} skills" in pull["body"]  # runnable without evolve_paths
        stable = ledger_refs(repo)["refs/heads/agentdescent/stable"]
        pushed = subprocess.run(["git", "-C", str(remote), "rev-parse",
                                 "refs/heads/agentdescent/stable"],
                                capture_output=True, text=True, check=True).stdout.strip()
        assert pushed == stable
        report = report_of(repo)
        assert report["pull_request"]["operation"] == "created"
        assert report["pull_request"]["number"] == pull["number"]
        assert TOKEN not in (repo / ".agentdescent/report.json").read_text()
        assert f"pr-number={pull['number']}" in outputs.read_text()

        # a second run with nothing new updates the same pull request in place
        again = evolve(repo, "--evolve-pr", "--evolve-sandbox", "bwrap", env=env)
        assert again.returncode == 0, explain(again)
        assert len(server.open_pulls()) == 1
        assert report_of(repo)["pull_request"]["operation"] in ("updated", "none")


def test_evolve_pr_without_a_token_fails_the_run_saying_what_to_set(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    result = evolve(repo, "--evolve-pr", "--evolve-rounds", "1", env={"GITHUB_TOKEN": ""})
    assert result.returncode == 1, explain(result)
    assert "pull request: failed: GITHUB_TOKEN is not set" in result.stdout
    # the evolution itself is kept
    assert report_of(repo)["accepted"] >= 1
