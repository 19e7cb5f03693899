"""The composite Action (action.yml): its shape, and its steps run for real, in order.

The script steps run here as a runner would run them (``bash --noprofile
--norc -eo pipefail`` on a file, the step's ``env:`` evaluated, one
``GITHUB_OUTPUT`` file per step, ``GITHUB_STEP_SUMMARY``, ``GITHUB_ACTION_PATH``
a fresh clone of this project, ``RUNNER_TEMP``), on a user repository whose
``origin`` is a real bare repository, with the GitHub test server as the API.
``uses:`` steps (actions/setup-python) are not run; the test gives no
``python-version``, so the Action skips them too.  A small evaluator covers
the expressions action.yml uses; an expression it does not know fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import USER_ENV, clone_working_tree, user_git
from github_server import GitHubTestServer, add_bare_remote
from test_cli_pr import read_outputs

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
STEPS: list[dict[str, Any]] = ACTION["runs"]["steps"]
TOKEN = "ghs_ActionSeCrEt0123456789abcdefTOKEN"
REPO = "octo/demo"

#: One xdist worker (``--dist loadgroup``): the module fixtures are built once, not per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("action")]


# ---------------------------------------------------------------- the file itself

def test_is_a_composite_action_with_the_documented_inputs_and_outputs() -> None:
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) == {
        "mode", "paths", "model", "rounds", "workers", "repeats", "executor", "python-version",
        "base", "pytest-args", "dry-run", "labels", "draft", "branch-prefix", "github-token"}
    assert ACTION["inputs"]["github-token"]["default"] == "${{ github.token }}"
    assert ACTION["inputs"]["branch-prefix"]["default"] == "agentdescent/"
    assert set(ACTION["outputs"]) == {
        "pull-request-number", "pull-request-url", "pull-request-operation",
        "pull-request-head-sha", "pull-request-branch", "pr-number", "pr-url", "pr-operation",
        "report", "reward-before", "reward-after", "cost-usd", "review-result", "comment-url"}
    assert ACTION["inputs"]["mode"]["default"] == "evolve"
    # the old names are aliases of create-pull-request's, not outputs of their own
    for old in ("number", "url", "operation"):
        assert ACTION["outputs"][f"pr-{old}"]["value"] == \
            ACTION["outputs"][f"pull-request-{old}"]["value"]
    for step in STEPS:  # third-party actions are pinned to a commit
        uses = step.get("uses", "")
        assert not uses or re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), uses
    for spec in ACTION["inputs"].values():
        assert spec["description"]


def test_every_run_step_has_a_shell_and_no_expression_in_its_script() -> None:
    run_steps = [step for step in STEPS if "run" in step]
    assert len(run_steps) >= 5
    for step in run_steps:
        assert step.get("shell") == "bash", step["name"]
        assert "${{" not in step["run"], step["name"]
        assert "inputs." not in step["run"], step["name"]
        for script in re.findall(r"action/[\w.]+", step["run"]):
            assert (ROOT / script).is_file(), script


def test_scripts_pass_shellcheck_style_basics() -> None:
    for script in sorted((ROOT / "action").glob("*.sh")):
        text = script.read_text(encoding="utf-8")
        assert text.startswith("#!/usr/bin/env bash\n"), script
        assert "set -euo pipefail" in text, script
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- a local runner

@dataclass
class StepResult:
    outcome: str  # success | failure | skipped
    outputs: dict[str, str] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""


@dataclass
class LocalRunner:
    """Runs the Action's steps like a GitHub runner, for the parts this Action uses."""

    workspace: Path
    inputs: dict[str, str]
    env: dict[str, str]
    steps: dict[str, StepResult] = field(default_factory=dict)
    failed: bool = False

    def __post_init__(self) -> None:
        # Input defaults are expressions too (github-token: ${{ github.token }}).
        self.inputs = {name: self.substitute(value) for name, value in self.inputs.items()}

    def lookup(self, name: str) -> str:
        parts = name.split(".")
        if parts[0] == "inputs":
            return self.inputs[parts[1]]
        if parts[0] == "github" and parts[1] == "token":
            return self.env["GITHUB_TOKEN"]
        if parts[0] == "steps":
            result = self.steps.get(parts[1])
            if result is None:
                return ""
            if parts[2] == "outputs":
                return result.outputs.get(parts[3], "")
            if parts[2] in ("outcome", "conclusion"):
                return result.outcome
        raise AssertionError(f"the test runner does not know the expression {name!r}")

    def evaluate(self, expression: str) -> Any:
        text = expression.strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2].strip()
        values: dict[str, Any] = {"True": True, "False": False}

        def name_of(match: re.Match[str]) -> str:
            name = f"_v{len(values)}"
            values[name] = self.lookup(match.group(0))
            return name

        python = re.sub(r"\b(?:inputs|steps|github)\.[A-Za-z0-9_.-]*[A-Za-z0-9_]", name_of, text)
        python = (python.replace("&&", " and ").replace("||", " or ")
                  .replace("always()", "True").replace("success()", repr(not self.failed))
                  .replace("failure()", repr(self.failed)).replace("cancelled()", "False"))
        python = re.sub(r"!(?!=)", " not ", python)
        bare = re.sub(r"'[^']*'", "''", python)
        assert re.fullmatch(r"[\s\w'()=!]*", bare), f"unsupported expression: {expression}"
        return eval(python, {"__builtins__": {}}, values)

    def substitute(self, value: object) -> str:
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(self.evaluate(m.group(1))), str(value))

    def run(self, *, skip: Mapping[str, StepResult] | None = None) -> None:
        for index, step in enumerate(STEPS):
            sid = step.get("id", f"__{index}")
            if skip and sid in skip:
                self.steps[sid] = skip[sid]
                continue
            condition = str(step.get("if", "success()"))
            if not re.search(r"\b(always|success|failure|cancelled)\(\)", condition):
                condition = f"success() && ({condition})"  # GitHub's implicit status check
            wanted = self.evaluate(condition)
            if not wanted:
                self.steps[sid] = StepResult("skipped")
                continue
            if "uses" in step:
                raise AssertionError(f"the test cannot run `uses: {step['uses']}`")
            self.steps[sid] = self.run_script(sid, step)
            if self.steps[sid].outcome == "failure":
                self.failed = True

    def run_script(self, sid: str, step: dict[str, Any]) -> StepResult:
        temp = Path(self.env["RUNNER_TEMP"])
        script = temp / f"step-{sid}.sh"
        script.write_text(step["run"], encoding="utf-8")
        outputs = temp / f"output-{sid}"
        outputs.write_text("", encoding="utf-8")
        env = dict(self.env, GITHUB_OUTPUT=str(outputs))
        env.update({k: self.substitute(v) for k, v in (step.get("env") or {}).items()})
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=self.workspace, env=env, capture_output=True, text=True,
                              timeout=900, check=False)
        outcome = "success" if done.returncode == 0 else "failure"
        return StepResult(outcome, read_outputs(outputs), done.stdout, done.stderr)

    def outputs(self) -> dict[str, str]:
        return {name: self.substitute(spec["value"]) for name, spec in ACTION["outputs"].items()}

    def log(self) -> str:
        return "\n".join(f"--- {sid}: {r.outcome}\n{r.stdout[-2500:]}\n{r.stderr[-2500:]}"
                         for sid, r in self.steps.items())


def defaults(**given: str) -> dict[str, str]:
    values = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    values.update({k.replace("_", "-"): v for k, v in given.items()})
    return values


@pytest.fixture(scope="session")  # shared with test_action_review (same xdist group)
def action_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A clone of the project (GITHUB_ACTION_PATH) and the install step's virtualenv."""
    base = tmp_path_factory.mktemp("action")
    action_path = clone_working_tree(ROOT, base / "action")
    temp = base / "runner-temp"
    temp.mkdir()
    env = base_env(action_path, temp, base / "summary-install.md", "http://127.0.0.1:9")
    install = next(step for step in STEPS if step.get("id") == "install")
    runner = LocalRunner(workspace=base, inputs=defaults(), env=env)
    result = runner.run_script("install", install)
    assert result.outcome == "success", result.stdout + result.stderr
    return {"action": action_path, "temp": temp, "python": Path(result.outputs["python"])}


def base_env(action_path: Path, temp: Path, summary: Path, api_url: str) -> dict[str, str]:
    # A runner's own PYTEST_ADDOPTS reaches the Action's pytest as it would on GitHub;
    # here it leaves out this machine's unused plugins (tests/conftest.py).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "PYTEST_", "AGENTDESCENT_", "RUNNER_"))
           or k == "PYTEST_ADDOPTS"}
    env.update(USER_ENV)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(GITHUB_ACTION_PATH=str(action_path), RUNNER_TEMP=str(temp),
               GITHUB_STEP_SUMMARY=str(summary), GITHUB_REPOSITORY=REPO,
               GITHUB_API_URL=api_url, GITHUB_TOKEN=TOKEN, GITHUB_ACTIONS="true",
               PYTHONDONTWRITEBYTECODE="1")
    summary.touch()
    return env


def test_install_step_puts_the_action_checkout_in_a_virtualenv(
        action_home: dict[str, Path]) -> None:
    python = action_home["python"]
    assert python.is_relative_to(action_home["temp"])
    code = "import pytest_agentdescent as m; print(m.__file__)"
    where = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                           cwd=action_home["temp"], check=True).stdout.strip()
    assert Path(where).is_relative_to(python.parent.parent)  # not the developer's checkout
    assert (python.parent / "agentdescent").is_file()


def user_repository(path: Path) -> Path:
    """The support-bot example as a user's repository on GitHub (its conftest proposes)."""
    shutil.copytree(ROOT / "examples" / "support-bot", path,
                    ignore=shutil.ignore_patterns("__pycache__", ".agentdescent"))
    user_git(path.parent, "init", "--quiet", "--initial-branch=main", str(path))
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "the bot")
    return path


def session(action_home: dict[str, Path], workspace: Path, server: GitHubTestServer,
            tmp: Path, **inputs: str) -> tuple[LocalRunner, str]:
    """One scheduled job: the Action's steps in a workspace, after the install step."""
    temp = tmp / "runner-temp"
    temp.mkdir()
    summary = tmp / "summary.md"
    env = base_env(action_home["action"], temp, summary, server.api_url)
    runner = LocalRunner(workspace=workspace, inputs=defaults(**inputs), env=env)
    installed = StepResult("success", {"python": str(action_home["python"])})
    runner.run(skip={"install": installed})
    return runner, summary.read_text(encoding="utf-8")


def remote_ref(bare: Path, ref: str) -> str:
    return user_git(bare, "for-each-ref", "--format=%(objectname)", ref).strip()


def test_two_scheduled_sessions_open_then_update_one_pull_request(
        action_home: dict[str, Path], tmp_path: Path) -> None:
    first_dir = tmp_path / "first"
    first_dir.mkdir()
    repo = user_repository(first_dir / "work")
    bare = add_bare_remote(repo, tmp_path)
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        runner, summary = session(action_home, repo, server, first_dir, paths="skills/",
                                  rounds="3", labels="agentdescent, nightly",
                                  pytest_args="-p no:randomly -p no:cacheprovider")
        log = runner.log()
        assert not runner.failed, log
        assert runner.steps["__0"].outcome == "skipped"  # no python-version: no setup-python
        out = runner.outputs()
        assert out["pr-operation"] == "created", log
        assert out["pr-number"] == out["pull-request-number"] == "1"
        assert out["pr-url"] == f"https://github.test/{REPO}/pull/1"
        assert out["pull-request-branch"] == "agentdescent/stable"
        assert out["pull-request-head-sha"] == user_git(repo, "rev-parse", "agentdescent/stable")
        assert out["report"].endswith("report.json")
        evolve_log = runner.steps["evolve"].stdout
        assert evolve_log.startswith("::group::Evolve"), log
        assert "::endgroup::" in evolve_log
        before, after = float(out["reward-before"]), float(out["reward-after"])
        assert before < after == 1.0
        assert sorted(server.pulls[1]["labels"]) == ["agentdescent", "nightly"]
        report_md = (repo / ".agentdescent/report.md").read_text(encoding="utf-8")
        assert "pull request:** created — https://github.test/octo/demo/pull/1" in summary
        assert report_md in summary
        # Dev and stable are on the remote for the next session; the token is nowhere.
        dev = remote_ref(bare, "refs/heads/agentdescent/dev")
        assert dev == user_git(repo, "rev-parse", "agentdescent/dev")
        assert remote_ref(bare, "refs/heads/agentdescent/stable")
        sessions = "refs/agentdescent/sessions"  # the scheduled-session history, when kept
        assert remote_ref(bare, sessions) == remote_ref(repo, sessions)
        assert TOKEN not in log + summary
        assert TOKEN not in (repo / ".agentdescent/report.json").read_text(encoding="utf-8")

        # The next scheduled job starts from an empty disk: a fresh (shallow) clone.
        second_dir = tmp_path / "second"
        second_dir.mkdir()
        user_git(second_dir, "clone", "--quiet", "--depth", "1", bare.as_uri(), "work")
        again = second_dir / "work"
        assert user_git(again, "rev-parse", "--is-shallow-repository") == "true"
        assert not user_git(again, "branch", "--list", "agentdescent/*")
        runner, summary = session(action_home, again, server, second_dir, paths="skills/",
                                  rounds="1", pytest_args="-p no:randomly")
        log = runner.log()
        assert not runner.failed, log
        out = runner.outputs()
        # It resumed from the fetched dev branch instead of starting over.
        assert "resumed refs/heads/agentdescent/dev" in runner.steps["__2"].stderr
        assert user_git(again, "rev-parse", "--is-shallow-repository") == "false"
        assert remote_ref(again, sessions) == remote_ref(bare, sessions)
        assert float(out["reward-before"]) == after
        assert out["pr-operation"] in ("updated", "none"), log
        assert len(server.pulls) == 1
        assert remote_ref(bare, "refs/heads/agentdescent/dev") == dev  # nothing new accepted


def test_dry_run_pushes_nothing_and_opens_no_pull_request(
        action_home: dict[str, Path], tmp_path: Path) -> None:
    repo = user_repository(tmp_path / "work")
    bare = add_bare_remote(repo, tmp_path)
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        runner, summary = session(action_home, repo, server, tmp_path, paths="skills/",
                                  rounds="1", dry_run="true", pytest_args="-p no:randomly")
        log = runner.log()
        assert not runner.failed, log
        assert runner.steps["pr"].outcome == "skipped"
        out = runner.outputs()
        assert out["pr-operation"] == ""
        assert float(out["reward-after"]) > float(out["reward-before"])
        assert "no artifact" not in summary
        assert "reward" in summary
        assert not server.requests
        assert user_git(bare, "for-each-ref") == user_git(bare, "for-each-ref", "refs/heads/main")
        assert not user_git(repo, "branch", "--list", "agentdescent/*")


def test_a_failed_evolution_fails_the_job_and_still_writes_the_summary(
        action_home: dict[str, Path], tmp_path: Path) -> None:
    repo = user_repository(tmp_path / "work")
    add_bare_remote(repo, tmp_path)
    with GitHubTestServer(repository=REPO, token=TOKEN) as server:
        runner, summary = session(action_home, repo, server, tmp_path, paths="prompts/")
        assert runner.failed
        assert runner.steps["evolve"].outcome == "failure"
        assert runner.steps["pr"].outcome == "skipped"
        assert "no report was written" in summary
        assert not server.requests
    evolve_log = runner.steps["evolve"].stdout + runner.steps["evolve"].stderr
    assert "prompts" in evolve_log
    assert json.loads(json.dumps(runner.outputs()))["reward-after"] == ""
