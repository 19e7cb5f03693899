"""The Claude example, examples/claude-skills, against a local Anthropic server.

The example's agent uses the real ``anthropic`` SDK; here it talks to
``tests/wire_servers.py``'s Messages API server through ``ANTHROPIC_BASE_URL``
(no mocks), and the tests assert on the requests that server received.  The
server's answers come from :func:`stand_in_claude`, a deterministic stand-in
for a model that does what its system prompt spells out and nothing more, so
the example's tasks fail with the committed skills and pass once the skills say
what the tests want.

Layers, cheapest first: the agent's request (in process); the example's own
suite as a child pytest (baseline, evolved skills, no key); and the README's
command, ``pytest --evolve skills/ --evolve-model anthropic:...``, in a clone,
where the model proposer's answer comes from the same server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import pytest
from conftest import clone_working_tree, user_git
from wire_servers import Received, WireServer, start_anthropic_server

from agentdescent_core.proposers.models import Usage
from agentdescent_core.proposers.pricing import PriceTable
from agentdescent_core.proposers.protocol import parse_edit_answer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "claude-skills"
PREFIX = "examples/claude-skills/"
TESTS = "tests/test_skills.py"
MODEL = "claude-haiku-4-5"
AGENT_MODEL = "claude-of-your-choice"
API_KEY = "sk-wire-test-placeholder"
IGNORED = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".agentdescent")
HOLDOUT_MATERIAL = ("feat/97-dark-mode", "What should go in the changelog this time?")


# ------------------------------------------------------------------ the stand-in model

_BRANCH_ISSUE = re.compile(r"on branch \S*?/(\d+)-")
_PULL_REQUEST = re.compile(r"^#(\d+) \[(\w+)\] (.+)$", re.M)


def stand_in_claude(received: Received) -> str:
    """Answer an agent request the way a model that follows its skill to the letter would.

    Each property the example's tests check appears in the answer only when the
    system prompt (the skill's body) asks for it.
    """
    system, user = received.system, received.user
    if "commit message" in system:
        return _commit_message(system, user)
    if "release notes" in system:
        return _release_notes(system, user)
    return "I have no instructions for this."


def _commit_message(system: str, user: str) -> str:
    verb = "Raise" if "imperative" in system else "Raised"
    if "UPLOAD_TIMEOUT" in user:
        what = ("the upload timeout to 30 seconds" if "50 characters" in system else
                "the upload timeout from 5 to 30 seconds so large files on slow links finish")
    else:
        what = "a dark theme setting" if "50 characters" in system else \
            "a dark theme to the settings so that people can switch the dashboard to dark mode"
    subject = f"{verb} {what}" + ("" if "period" in system else ".")
    message = f"{subject}\n\nUsers reported the change was needed."
    issue = _BRANCH_ISSUE.search(user)
    if "Refs #" in system and issue:
        message += f"\n\nRefs #{issue[1]}"
    return message


def _release_notes(system: str, user: str) -> str:
    version = re.search(r"version (\S+)", user)
    lines = [f"# Release {version[1] if version else '?'}", ""]
    entries = [(int(n), label, title) for n, label, title in _PULL_REQUEST.findall(user)]
    if "internal" in system:
        entries = [e for e in entries if e[1] != "internal"]

    def entry(number: int, title: str) -> str:
        return f"- {title} (#{number})" if "(#" in system else f"- #{number} {title}"

    if "### Added" in system:
        for heading, label in (("### Added", "feature"), ("### Fixed", "bug")):
            lines += [heading, *(entry(n, t) for n, lab, t in entries if lab == label), ""]
    else:
        lines += [entry(n, t) for n, _, t in entries]
    return "\n".join(lines).strip() + "\n"


def sent_key(request: Received) -> str | None:
    """The API key a request carried (SDK versions send x-api-key or a bearer token)."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    return request.headers.get("x-api-key") or bearer or None


def agent_calls(server: WireServer) -> list[Received]:
    return [r for r in server.calls if r.user.startswith("Write the ")]


def proposer_calls(server: WireServer) -> list[Received]:
    return [r for r in server.calls if not r.user.startswith("Write the ")]


# ------------------------------------------------------------------ what a model would propose

def skill_path(name: str) -> str:
    return f"{PREFIX}skills/{name}/SKILL.md"


PROPOSAL = {
    "rationale": "Spell out the commit and release-notes conventions the team checks, "
                 "and say in the description that release notes cover changelog entries.",
    "edits": [
        {"path": skill_path("commit-message"),
         "search": "- Start with a subject line that says what the change does.\n",
         "replace": "- Start with a subject line of at most 50 characters that says what the "
                    "change does, in the imperative mood (\"Fix\", not \"Fixed\"), with no "
                    "period at the end.\n"},
        {"path": skill_path("commit-message"),
         "search": "explains why the change was made.\n",
         "replace": "explains why the change was made.\n- When the branch name holds an issue "
                    "number (fix/123-..., feat/45-...), end with a line `Refs #<number>`.\n"},
        {"path": skill_path("release-notes"),
         "search": "into release notes for a version.",
         "replace": "into release notes or a changelog entry for a version."},
        {"path": skill_path("release-notes"),
         "search": "product understands.\n",
         "replace": "product understands, ending with its number in parentheses: `(#231)`.\n"
                    "- Group the entries under `### Added` (features) and `### Fixed` (bugs).\n"
                    "- Leave out pull requests labelled internal.\n"},
    ],
}
PROPOSAL_TEXT = ("The failures show conventions the skills never state.\n\n```json\n"
                 + json.dumps(PROPOSAL, indent=2) + "\n```\n")


# ------------------------------------------------------------------ helpers

def import_agent() -> ModuleType:
    """Import the example's ``agent`` module under its own name (MODEL is read now)."""
    spec = importlib.util.spec_from_file_location("agent", EXAMPLE / "agent.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def agent() -> Iterator[ModuleType]:
    """The example's ``agent`` module; the other examples' ``agent`` is put back afterwards."""
    saved = sys.modules.pop("agent", None)
    try:
        yield import_agent()
    finally:
        sys.modules.pop("agent", None)
        if saved is not None:
            sys.modules["agent"] = saved


@pytest.fixture
def server() -> Iterator[WireServer]:
    with start_anthropic_server() as running:
        running.script([], then=stand_in_claude)
        yield running


def copy_example(tmp_path: Path) -> Path:
    target = tmp_path / "claude-skills"
    shutil.copytree(EXAMPLE, target, ignore=IGNORED)
    return target


def child_env(server: WireServer | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for name in ("AGENTDESCENT_CHILD", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
                 "ANTHROPIC_BASE_URL", "CLAUDE_SKILLS_MODEL"):
        env.pop(name, None)
    if server is not None:
        env.update(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=API_KEY)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run_suite(example: Path, server: WireServer | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", TESTS],
        cwd=example, env=child_env(server), capture_output=True, text=True, timeout=300,
        check=False,
    )


def outcomes(stdout: str) -> dict[str, str]:
    """test function name -> PASSED / FAILED / SKIPPED / ERROR, from the ``-v`` lines."""
    return dict(re.findall(r"^\S+?::(\w+) (PASSED|FAILED|SKIPPED|ERROR)\b", stdout, re.M))


def skill_files(example: Path, prefix: str = PREFIX) -> dict[str, str]:
    return {prefix + p.relative_to(example).as_posix(): p.read_text("utf-8")
            for p in sorted((example / "skills").glob("*/SKILL.md"))}


def apply_proposal(example: Path) -> None:
    """Write what the model's scripted answer asks for, parsed by the real edit protocol."""
    proposal = parse_edit_answer(PROPOSAL_TEXT, skill_files(example))
    for path, text in proposal.ops.items():
        assert text is not None
        (example / path.removeprefix(PREFIX)).write_text(text, encoding="utf-8")


BASELINE_PASSING = {"test_commit_body_follows_a_blank_line", "test_release_notes_name_the_version",
                    "test_a_staged_changes_request_uses_the_commit_skill",
                    "test_skills_are_well_formed"}
MODEL_TESTS = 10  # tests that call the model once each


# ------------------------------------------------------------------ the agent's request

def test_the_agent_sends_the_chosen_skill_as_system_prompt(
    agent: ModuleType, server: WireServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    client = anthropic.Anthropic(timeout=10.0, max_retries=0)  # key and URL from the environment
    diff = "-UPLOAD_TIMEOUT_SECONDS = 5\n+UPLOAD_TIMEOUT_SECONDS = 30\n"
    message = agent.write_commit_message(diff, "fix/7-timeout", client=client)
    assert message.startswith("Raised the upload timeout from 5 to 30 seconds")

    [request] = server.calls
    assert sent_key(request) == API_KEY
    assert request.model == MODEL
    assert request.body["max_tokens"] == agent.MAX_TOKENS
    skill = (EXAMPLE / "skills" / "commit-message" / "SKILL.md").read_text("utf-8")
    body = skill.split("---\n", 2)[2].strip()
    assert request.system.strip() == body, "the system prompt is the skill without frontmatter"
    assert "description:" not in request.system
    assert request.user.startswith("Write the commit message for these staged changes "
                                   "on branch fix/7-timeout\n\n")
    assert request.user.endswith(diff)


def test_the_model_name_comes_from_the_environment(agent: ModuleType, server: WireServer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_SKILLS_MODEL", AGENT_MODEL)
    module = import_agent()  # again, now that the variable is set; the fixture cleans up
    client = anthropic.Anthropic(api_key=API_KEY, base_url=server.base_url, max_retries=0)
    module.write_release_notes("1.0", "#1 [bug] Crash on start", client=client)
    assert server.calls[0].model == AGENT_MODEL


def test_a_skill_is_chosen_by_its_description(agent: ModuleType, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    for name, description in (("haiku", "Write a haiku about a topic."),
                              ("limerick", "Write a limerick for a birthday card.")):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {description}\n---\n\nDo it well.\n", "utf-8")
    loaded = agent.load_skills(skills)
    assert [s.name for s in loaded] == ["haiku", "limerick"]
    assert loaded[0].body == "Do it well.\n"
    assert agent.choose_skill("A poem for Ada's birthday card", loaded).name == "limerick"
    assert agent.choose_skill("Three lines about autumn, haiku style", loaded).name == "haiku"
    assert agent.choose_skill("Fix my printer", loaded) is None
    with pytest.raises(LookupError, match=r"no skill .* fits 'Fix my printer'"):
        agent.ask("Fix my printer", "", client=anthropic.Anthropic(api_key="unused"),
                  skills_dir=skills)

    (skills / "haiku" / "SKILL.md").write_text("Just the body, no frontmatter.\n", "utf-8")
    with pytest.raises(agent.SkillFormatError, match=r"haiku/SKILL\.md: a SKILL\.md must start"):
        agent.load_skills(skills)


# ------------------------------------------------------------------ the example's suite

def test_the_committed_skills_fail_most_tasks(server: WireServer, tmp_path: Path) -> None:
    done = run_suite(copy_example(tmp_path), server)
    got = outcomes(done.stdout)
    assert len(got) == 14, done.stdout[-3000:]
    assert {n for n, o in got.items() if o == "PASSED"} == BASELINE_PASSING, done.stdout[-3000:]
    assert "evolve: 13 tasks, reward 0.231" in done.stdout  # 3 of 13 tasks pass
    # what a proposer reads: the rewritten assertion and the answer the agent printed
    assert "where 83 = len('Raised the upload timeout from 5 to 30 seconds" in done.stdout
    assert "AssertionError: assert 'Users report...e was needed.' == 'Refs #482'" in done.stdout
    assert "claude-skills answer:" in done.stdout

    calls = agent_calls(server)
    assert len(calls) == len(server.calls) == MODEL_TESTS
    assert {c.model for c in calls} == {MODEL}
    assert {sent_key(c) for c in calls} == {API_KEY}
    bodies = {p.parent.name: p.read_text("utf-8").split("---\n", 2)[2].strip()
              for p in (EXAMPLE / "skills").glob("*/SKILL.md")}
    assert sum(c.system.strip() == bodies["commit-message"] for c in calls) == 6
    assert sum(c.system.strip() == bodies["release-notes"] for c in calls) == 4


def test_the_skills_a_model_would_write_pass_every_task(server: WireServer,
                                                        tmp_path: Path) -> None:
    example = copy_example(tmp_path)
    apply_proposal(example)
    done = run_suite(example, server)
    got = outcomes(done.stdout)
    assert len(got) == 14, done.stdout[-3000:]
    assert set(got.values()) == {"PASSED"}, done.stdout[-3000:]
    assert "evolve: 13 tasks, reward 1.000" in done.stdout
    assert len(agent_calls(server)) == MODEL_TESTS


def test_without_a_key_the_model_tasks_are_skipped_with_what_to_set(tmp_path: Path) -> None:
    done = run_suite(copy_example(tmp_path), None)
    got = outcomes(done.stdout)
    assert sum(o == "SKIPPED" for o in got.values()) == MODEL_TESTS, done.stdout[-3000:]
    assert got["test_skills_are_well_formed"] == "PASSED"
    assert got["test_a_changelog_request_uses_the_release_notes_skill"] == "FAILED"
    assert "set ANTHROPIC_API_KEY" in done.stdout


def test_the_guard_catches_a_broken_skill(tmp_path: Path) -> None:
    example = copy_example(tmp_path)
    skill = example / "skills" / "release-notes" / "SKILL.md"
    skill.write_text(skill.read_text("utf-8").replace("name: release-notes", "name: Notes"),
                     "utf-8")
    assert outcomes(run_suite(example, None).stdout)["test_skills_are_well_formed"] == "FAILED"
    skill.write_text("# Release notes\n\nNo frontmatter any more.\n", "utf-8")
    done = run_suite(example, None)
    assert outcomes(done.stdout)["test_skills_are_well_formed"] == "FAILED"
    assert "a SKILL.md must start with a '---' frontmatter block" in done.stdout


# ------------------------------------------------------------------ the README's command

def proposer_answer(received: Received) -> str:
    """The proposer gets the scripted edit; the agent's own requests get the stand-in."""
    if received.user.startswith("Write the "):
        return stand_in_claude(received)
    return PROPOSAL_TEXT


@pytest.mark.slow
def test_evolve_with_the_model_proposer_reaches_full_reward(tmp_path: Path) -> None:
    pytest.importorskip("pytest_agentdescent.model_proposer")
    clone = clone_working_tree(ROOT, tmp_path / "project")
    refs_before = user_git(clone, "for-each-ref", "--format=%(refname) %(objectname)")
    with start_anthropic_server() as server:
        server.script([], then=proposer_answer)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--evolve", "skills/", "--evolve-model",
             f"anthropic:{MODEL}", "--evolve-dry-run", "--evolve-sandbox", "local"],
            cwd=clone / "examples" / "claude-skills",
            env={**child_env(server), "CLAUDE_SKILLS_MODEL": AGENT_MODEL},
            capture_output=True, text=True, timeout=600, check=False,
        )
    output = f"{done.stdout[-5000:]}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, output
    report: dict[str, Any] = json.loads(
        (clone / ".agentdescent" / "report.json").read_text("utf-8"))
    assert report["error"] is None, output
    assert report["reward_before"] == pytest.approx(3 / 13, abs=1e-3)
    assert report["reward_after"] == 1.0, output
    assert report["accepted"] >= 1
    assert report["holdout"]["reward_after"] == 1.0, "the holdout tasks were never shown"

    asked = proposer_calls(server)
    assert 1 <= len(asked) == report["calls"], output
    assert {r.model for r in asked} == {MODEL}
    # the example's evolve_env passes the agent's model to the candidates' tests
    assert {r.model for r in agent_calls(server)} == {AGENT_MODEL}
    prompts = "\n".join(r.text for r in asked)
    # pytest's assertion messages, the agent's printed answers and the skills reach the
    # model (at most six failures a prompt, so not necessarily every one) ...
    assert "AssertionError: assert 'Users report...e was needed.' == 'Refs #482'" in prompts
    assert "assert '### Added' in ['# Release 2.3.0']" in prompts
    assert "claude-skills answer:" in prompts
    assert skill_path("commit-message") in prompts
    assert skill_path("release-notes") in prompts
    # ... and nothing of a holdout task does
    for r in asked:
        for secret in HOLDOUT_MATERIAL:
            assert secret not in r.text
    # usage as the server reported it (it counts words), priced as claude-haiku-4-5
    usage = Usage(sum(len(r.text.split()) for r in asked),
                  len(asked) * len(PROPOSAL_TEXT.split()))
    assert report["model"]["input_tokens"] == usage.input_tokens
    assert report["model"]["output_tokens"] == usage.output_tokens
    assert report["cost_usd"] == pytest.approx(PriceTable().cost(MODEL, usage))
    assert report["cost_usd"] > 0
    # a dry run: no ref of the clone changed, its working tree is as it was
    assert user_git(clone, "for-each-ref", "--format=%(refname) %(objectname)") == refs_before
    assert user_git(clone, "status", "--porcelain") == ""
