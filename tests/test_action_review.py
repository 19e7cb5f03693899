"""The Action's ``mode: review`` on a pull request: one sticky comment, the verdict as exit code.

The steps of action.yml run for real (the local runner of ``test_action``) in
a checkout of the pull request's head, with ``$GITHUB_EVENT_PATH`` holding a
``pull_request`` event as GitHub writes it, ``origin`` a real bare repository
and the GitHub test server as the API.  The user repository is the agent of
the session tests: its marked tests pass once ``skills/support/rules.md`` has
the missing rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import user_git, write
from github_server import GitHubTestServer, add_bare_remote
from test_action import REPO, TOKEN, LocalRunner, StepResult, action_home, base_env, defaults
from test_cli_review import BETTER, branch
from test_session_runs import RULES, make_agent_repo

from agentdescent_core.github import REVIEW_MARKER

#: The worker of test_action (``--dist loadgroup``), so the install step's virtualenv is built once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("action")]

__all__ = ["action_home"]  # the session fixture of test_action, used here too


def pull_request_checkout(tmp_path: Path, head: dict[str, str]) -> tuple[Path, str]:
    """The agent repository with ``origin``, checked out at a pull request branch ``pr``."""
    repo = tmp_path / "agent"
    make_agent_repo(repo, ini="evolve_paths = skills\nevolve_sandbox = local\n")
    add_bare_remote(repo, tmp_path)
    base = user_git(repo, "rev-parse", "main")
    branch(repo, "pr", head)
    user_git(repo, "checkout", "--quiet", "pr")
    return repo, base


def review_job(home: dict[str, Path], repo: Path, server: GitHubTestServer, tmp: Path,
               *, number: int, base: str, name: str) -> tuple[LocalRunner, str]:
    """One ``on: pull_request`` job running the Action with ``mode: review``."""
    job = tmp / name
    job.mkdir()
    temp = job / "runner-temp"
    temp.mkdir()
    event = job / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": number, "pull_request": {
        "number": number, "base": {"ref": "main", "sha": base},
        "head": {"ref": "pr", "sha": user_git(repo, "rev-parse", "HEAD")}}}), encoding="utf-8")
    env = base_env(home["action"], temp, job / "summary.md", server.api_url)
    env.update(GITHUB_EVENT_NAME="pull_request", GITHUB_EVENT_PATH=str(event))
    runner = LocalRunner(workspace=repo, inputs=defaults(
        mode="review", repeats="1", pytest_args="-p no:randomly -p no:cacheprovider"), env=env)
    # As on GitHub: the token is in no step's environment unless its env: gives it.
    del runner.env["GITHUB_TOKEN"]
    runner.run(skip={"install": StepResult("success", {"python": str(home["python"])})})
    return runner, (job / "summary.md").read_text(encoding="utf-8")


def test_a_second_run_updates_the_one_review_comment(
        action_home: dict[str, Path], tmp_path: Path) -> None:
    repo, base = pull_request_checkout(tmp_path, {RULES: BETTER})
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        number = server.add_pull(head="pr")["number"]
        runner, summary = review_job(action_home, repo, server, tmp_path, number=number,
                                     base=base, name="first")
        log = runner.log()
        assert not runner.failed, log
        for sid in ("evolve", "pr"):  # review mode neither evolves nor opens a pull request
            assert runner.steps[sid].outcome == "skipped"
        out = runner.outputs()
        assert out["review-result"] == "passed", log
        assert len(server.comments) == 1
        (first,) = server.comments.values()
        assert out["comment-url"] == first["html_url"]
        body = first["body"]
        assert body.startswith(REVIEW_MARKER)
        assert "agentdescent review: PASSED" in body
        assert "| reward | 0.000 | 1.000 |" in body
        assert "P(improvement) 1.00" in body
        assert "repeats: base" in body
        assert "| `tests/test_bot.py::test_answers[hello-0]` | train | 0.000 | 1.000 | " \
               "fail->pass |" in body
        assert f"--base {base}" in body
        assert body in summary
        assert TOKEN not in log + body + summary

        # The author pushes another commit; the same comment now shows the new head.
        write(repo / "skills/support/style.md", "Be brief, and kind.\n")
        user_git(repo, "commit", "--quiet", "-am", "kinder")
        head = user_git(repo, "rev-parse", "HEAD")
        runner, _ = review_job(action_home, repo, server, tmp_path, number=number, base=base,
                               name="second")
        assert not runner.failed, runner.log()
        assert list(server.comments) == [first["id"]]
        assert server.pulls[number]["comments"] == [server.comments[first["id"]]["body"]]
        again = server.comments[first["id"]]["body"]
        assert again != body
        assert f"head `{head[:12]}`" in again
        assert "2 changed file(s)" in again
        assert runner.outputs()["comment-url"] == first["html_url"]
        assert [r.method for r in server.requests if "/comments" in r.path].count("POST") == 1
        assert any(r.method == "PATCH" and r.path.endswith(f"/issues/comments/{first['id']}")
                   for r in server.requests)


def test_a_failing_review_marks_the_comment_failed_and_fails_the_step(
        action_home: dict[str, Path], tmp_path: Path) -> None:
    repo, base = pull_request_checkout(tmp_path, {
        RULES: BETTER, "tests/test_bot.py": "def test_answers():\n    pass\n"})
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        number = server.add_pull(head="pr")["number"]
        runner, summary = review_job(action_home, repo, server, tmp_path, number=number,
                                     base=base, name="job")
        assert runner.failed
        assert runner.steps["review-run"].outcome == "success"  # the verdict fails the job
        assert runner.steps["review"].outcome == "failure"
        assert "::error::agentdescent review FAILED" in runner.steps["review"].stdout
        assert runner.outputs()["review-result"] == "failed"
        (comment,) = server.comments.values()
        body = comment["body"]
        assert "agentdescent review: FAILED" in body
        assert "| `tests/test_bot.py` | modified |" in body
        assert "### Why it failed" in body
        assert "reward |" not in body  # nothing was evaluated
        assert body in summary


def test_a_pull_request_without_artifact_changes_is_skipped_without_a_comment(
        action_home: dict[str, Path], tmp_path: Path) -> None:
    repo, base = pull_request_checkout(tmp_path, {"src/app.py": "print('app v2')\n"})
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        number = server.add_pull(head="pr")["number"]
        runner, summary = review_job(action_home, repo, server, tmp_path, number=number,
                                     base=base, name="job")
        assert not runner.failed, runner.log()
        out = runner.outputs()
        assert out["review-result"] == "skipped"
        assert out["comment-url"] == ""
        assert not server.comments
        assert "SKIPPED" in summary
        assert "changes no file under the artifact roots" in summary
