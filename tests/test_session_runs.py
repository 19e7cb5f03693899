"""``pytest --evolve skills/`` end to end, as a user runs it, on real git repositories.

Each test builds an agent repository in a temporary folder — a skill folder,
marked tests that fail with "missing rule: WORD" until the rules file has a
line for WORD, a guard, and a conftest ``pytest_evolve_propose`` that learns
the missing rule from the assertion message — and runs ``python -m pytest
--evolve skills`` in a subprocess, like a user would.  Candidates run under
the ``local`` backend (isolation is what the sandbox tests are about).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot, user_git, write

from agentdescent_core.evaluation.journal import CHILD_ENV
from agentdescent_core.report import REQUIRED_KEYS

pytestmark = pytest.mark.slow

WORDS = ("hello", "refund", "shipping")
RULES = "skills/support/rules.md"

TESTS = '''\
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[1] / "skills" / "support" / "rules.md"
CASES = [
    pytest.param(word, case, marks=pytest.mark.evolve(holdout=case == 2))
    for word in WORDS_HERE
    for case in range(3)
]


@pytest.mark.parametrize(("word", "case"), CASES)
def test_answers(word, case):
    assert f"- {word}" in RULES.read_text(), f"missing rule: {word}"


@pytest.mark.evolve_guard
def test_rules_keep_their_title():
    assert RULES.read_text().startswith("# Support rules")


def test_unmarked():
    pass
'''.replace("WORDS_HERE", repr(WORDS))

#: The body of a ``pytest_evolve_propose`` that learns "missing rule: WORD" from the
#: failures: one rule per call, None once the rules file has every rule asked for.
LEARN_RULE = '''\
    path = next(p for p in context.files if p.endswith("rules.md"))
    text = context.files[path]
    for failure in context.failures:
        found = re.search(r"missing rule: (\\w+)", failure.message)
        if found and f"- {found.group(1)}" not in text:
            return {path: text + f"- {found.group(1)}: answer it\\n"}
    return None
'''

#: Learns "missing rule: WORD" from the failures; logs every context it saw,
#: every round and the report (one JSON line each) to the file named by AD_PROPOSER_LOG.
PROPOSER = '''\
import json
import os
import re
import re


def _log(entry):
    log = os.environ.get("AD_PROPOSER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\\n")


def pytest_evolve_propose(context):
    _log({
        "failures": [f.nodeid for f in context.failures],
        "messages": [f.message for f in context.failures],
        "sources": [f.source for f in context.failures],
        "files": sorted(context.files), "roots": list(context.roots),
        "round": context.round, "worker": context.worker,
    })
LEARN_RULE_HERE

def pytest_evolve_round(info):
    _log({"hook": "round", "round": info.round, "accepted": info.accepted,
          "reward": info.reward, "outcomes": dict(info.outcomes), "calls": info.calls})


def pytest_evolve_report(report):
    _log({"hook": "report", "reward_after": report["reward_after"]})
'''.replace("LEARN_RULE_HERE", LEARN_RULE)

HOSTILE = '''\
EDITS = [
    {"tests/test_bot.py": "def test_answers():\\n    pass\\n"},
    {"conftest.py": "# gone\\n"},
    {"skills/conftest.py": "import pytest\\n"},
    {"skills/support/test_sneaky.py": "def test_x():\\n    pass\\n"},
    {"src/app.py": "print('pwned')\\n"},
    {"../outside.md": "escape\\n"},
    {"skills/../tests/test_bot.py": "x = 1\\n"},
]
CALLS = []


def pytest_evolve_propose(context):
    CALLS.append(context.worker)
    return EDITS[(len(CALLS) - 1) % len(EDITS)]
'''


def make_agent_repo(path: Path, *, proposer: str = PROPOSER, ini: str = "",
                    init: bool = True) -> str:
    """A committed agent repository at ``path``; returns the base commit.

    ``init=False``: ``path`` lies inside an existing repository (a monorepo).
    """
    path.mkdir(parents=True, exist_ok=True)
    if init:
        user_git(path, "init", "--quiet", "--initial-branch=main")
    write(path / RULES, "# Support rules\n\n- greeting: say hi\n")
    write(path / "skills/support/style.md", "Be brief.\n")
    write(path / "tests/test_bot.py", TESTS)
    write(path / "conftest.py", proposer)
    write(path / "pytest.ini", "[pytest]\n" + ini)
    write(path / "src/app.py", "print('app')\n")
    write(path / "README.md", "# Bot\n")
    write(path / ".gitignore", "*.log\n")
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "the agent")
    return user_git(path, "rev-parse", "HEAD")


def add_work_in_progress(path: Path) -> None:
    write(path / "README.md", "# Bot\n\nedited, not staged\n")
    write(path / "src/app.py", "print('app v2')\n")
    user_git(path, "add", "src/app.py")
    write(path / "notes.txt", "untracked\n")
    write(path / "debug.log", "ignored\n")


LEAN = ("-p", "no:cacheprovider", "-p", "no:benchmark")


def evolve(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
           every_plugin: bool = False) -> subprocess.CompletedProcess[str]:
    """``pytest --evolve skills`` in ``cwd`` as a user runs it; later ``args`` win.

    ``every_plugin``: without the ``PYTEST_ADDOPTS`` of ``tests/conftest.py``, so the
    run and its children load every plugin installed here, as a user's would.
    """
    drop = {CHILD_ENV, "PYTEST_ADDOPTS"} if every_plugin else {CHILD_ENV}
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    environ["PYTHONDONTWRITEBYTECODE"] = "1"
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", *LEAN,
         "--evolve", "skills",
         "--evolve-sandbox", "local", "--evolve-workers", "2", "--evolve-rounds", "6", *args],
        cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout, check=False,
    )


def plain_reward(repo: Path) -> tuple[int, float]:
    """Tasks and reward of a plain ``pytest`` run's ``evolve: N tasks, reward R`` line."""
    result = subprocess.run([sys.executable, "-m", "pytest", *LEAN],
                            cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    found = re.search(r"evolve: (\d+) tasks?, reward ([0-9.]+)", result.stdout)
    assert found, explain(result)
    return int(found.group(1)), float(found.group(2))


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def report_of(repo: Path) -> dict[str, Any]:
    raw = (repo / ".agentdescent/report.json").read_bytes()
    data = json.loads(raw.decode("utf-8"))  # strict: the report is valid UTF-8
    assert isinstance(data, dict)
    return data


def messages(report: dict[str, Any]) -> list[str]:
    """Every merge decision's message of a report, round by round."""
    return [m for entry in report["history"] for m in entry["messages"]]


def user_visible(repo: Path) -> dict[str, str]:
    """Everything the run must leave alone: the snapshot minus the state dir and exclude."""
    return {k: v for k, v in snapshot(repo).items()
            if not k.startswith(".agentdescent") and k != ".git/info/exclude"}


def ledger_refs(repo: Path) -> dict[str, str]:
    out = user_git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


# ---------------------------------------------------------------- a real run


def test_evolve_commits_skills_only_and_leaves_the_checkout_alone(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    base = make_agent_repo(repo)
    add_work_in_progress(repo)
    status = user_git(repo, "status", "--porcelain")
    before = user_visible(repo)
    log = tmp_path / "proposer.jsonl"

    result = evolve(repo, env={"AD_PROPOSER_LOG": str(log)})

    assert result.returncode == 0, explain(result)
    assert user_visible(repo) == before
    assert user_git(repo, "status", "--porcelain") == status
    assert "/.agentdescent/" in (repo / ".git/info/exclude").read_text().splitlines()
    refs = ledger_refs(repo)
    dev, stable = refs["refs/heads/agentdescent/dev"], refs["refs/heads/agentdescent/stable"]
    assert user_git(repo, "rev-parse", "HEAD") == base
    changed = user_git(repo, "diff", base, "agentdescent/stable", "--name-only").splitlines()
    assert changed == [RULES]
    evolved = user_git(repo, "show", f"agentdescent/stable:{RULES}")
    assert all(f"- {word}" in evolved for word in WORDS)

    report = report_of(repo)
    assert set(REQUIRED_KEYS) <= set(report)
    assert report["reward_after"] > report["reward_before"]
    assert report["reward_after"] == 1.0
    assert report["error"] is None
    assert (report["dev"], report["stable"]) == (dev, stable)
    assert report["accepted"] >= 1
    assert report["calls"] >= 1
    assert report["holdout"]["tasks"] == 3
    assert report["train"]["tasks"] == 6
    assert {row["nodeid"] for row in report["tasks"] if row["holdout"]} == {
        f"tests/test_bot.py::test_answers[{w}-2]" for w in WORDS}
    assert (repo / ".agentdescent/report.md").read_text().startswith("# agentdescent report")

    out = result.stdout
    assert "agentdescent evolve" in out
    assert "artifact: skills (2 files)" in out
    assert "tasks: 9 (6 train, 3 holdout); guards: 1; 1 unmarked tests are not run" in out
    assert "sandbox: local" in out
    assert "proposer: pytest_evolve_propose (conftest.py)" in out
    assert f"base: {base[:12]} (main)" in out
    assert "baseline  reward 0.000" in out
    assert "round 1/6  reward" in out
    assert "accepted v1" in out
    assert "reward    0.000 -> 1.000" in out
    assert f"stable    {stable[:12]}" in out

    # the proposer saw failing train tasks only: no holdout name, ever
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [entry for entry in logged if "hook" not in entry]
    rounds = [entry for entry in logged if entry.get("hook") == "round"]
    assert len(calls) == report["calls"]
    assert [r["round"] for r in rounds] == list(range(1, report["rounds"] + 1))
    assert sum(r["calls"] for r in rounds) == report["calls"]
    assert rounds[-1]["reward"] == 1.0
    assert rounds[0]["accepted"]
    assert rounds[0]["outcomes"]["committed"] >= 1
    assert logged[-1] == {"hook": "report", "reward_after": 1.0}
    seen = {nodeid for call in calls for nodeid in call["failures"]}
    assert seen
    assert not any(nodeid.endswith("-2]") for nodeid in seen)
    assert all(call["roots"] == ["skills"] for call in calls)
    assert all(call["files"] == [RULES, "skills/support/style.md"] for call in calls)
    assert all("def test_answers" in src for call in calls for src in call["sources"])
    assert all(m.startswith("AssertionError: missing rule:") or "missing rule:" in m
               for call in calls for m in call["messages"])

    # a second run resumes from dev: nothing left to fix, nothing moves
    again = evolve(repo)
    assert again.returncode == 0, explain(again)
    assert "ledger: resum" in again.stdout
    second = report_of(repo)
    assert second["reward_before"] == 1.0
    assert second["accepted"] == 0
    assert second["stop_reason"] == "target_reward"
    assert ledger_refs(repo)["refs/heads/agentdescent/dev"] == dev
    assert user_visible(repo) == before


def test_dry_run_changes_no_ref_and_prints_the_evolved_diff(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    refs = ledger_refs(repo)
    before = user_visible(repo)

    result = evolve(repo, "--evolve-dry-run")

    assert result.returncode == 0, explain(result)
    assert ledger_refs(repo) == refs
    assert not any("agentdescent" in ref for ref in ledger_refs(repo))
    assert user_visible(repo) == before
    assert "ledger: dry run on a scratch repository" in result.stdout
    assert "evolved diff (dry run)" in result.stdout
    assert f"--- a/{RULES}" in result.stdout
    assert all(f"+- {word}: answer it" in result.stdout for word in WORDS)
    report = report_of(repo)
    assert report["dry_run"] is True
    assert report["dev"] is None
    assert report["stable"] is None
    assert report["reward_after"] == 1.0 > report["reward_before"]
    assert "+- hello: answer it" in report["diff"]
    assert "next      run again without --evolve-dry-run to record the accepted versions on " \
        "agentdescent/dev" in result.stdout


def test_monorepo_project_in_a_subdirectory(tmp_path: Path) -> None:
    root = tmp_path / "mono"
    root.mkdir()
    user_git(root, "init", "--quiet", "--initial-branch=main")
    write(root / "README.md", "# many projects\n")
    write(root / "other/tests/test_other.py", "def test_other():\n    assert False\n")
    project = root / "apps" / "bot"
    base = make_agent_repo(project, init=False)
    assert not (project / ".git").exists()
    assert user_git(root, "ls-files", "apps/bot/tests/test_bot.py") == "apps/bot/tests/test_bot.py"

    result = evolve(project, "--evolve-workers", "1")

    assert result.returncode == 0, explain(result)
    assert "repository: " in result.stdout
    assert "(tests run in apps/bot/)" in result.stdout
    changed = user_git(root, "diff", base, "agentdescent/stable", "--name-only").splitlines()
    assert changed == [f"apps/bot/{RULES}"]
    report = json.loads((root / ".agentdescent/report.json").read_text())
    assert report["subdir"] == "apps/bot"
    assert report["roots"] == ["apps/bot/skills"]
    assert report["reward_after"] == 1.0
    assert report["tasks"][0]["nodeid"].startswith("tests/test_bot.py::")
    assert not (project / ".agentdescent").exists()
    # the paths it prints open from where the user ran it; then what to do next
    assert "report    ../../.agentdescent/report.json (and report.md)" in result.stdout
    assert "next      git diff HEAD agentdescent/stable" in result.stdout
    assert "agentdescent review" in result.stdout


def test_a_proposer_editing_tests_config_or_outside_the_roots_gets_nothing_accepted(
        tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    base = make_agent_repo(repo, proposer=HOSTILE)

    result = evolve(repo, "--evolve-rounds", "4")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    assert report["accepted"] == 0
    assert report["calls"] >= len(("tests", "conftest", "skills/conftest", "test module",
                                   "outside", "..", "skills/.."))
    refs = ledger_refs(repo)
    assert refs["refs/heads/agentdescent/dev"] == base
    assert refs["refs/heads/agentdescent/stable"] == base
    outcomes = report["outcomes"]
    assert "committed" not in outcomes
    assert sum(outcomes.values()) == report["calls"]  # every refusal counted, by category
    assert set(outcomes) == {"invalid-proposal", "frozen-violation"}
    said = "\n".join(m for info in report["history"] for m in info["messages"])
    for code in ("(outside-artifact)", "(executable-config)", "(parent-traversal)",
                 "(frozen-path)"):
        assert code in said
    assert "rejected: frozen-violation x1, invalid-proposal x5" in result.stdout


def test_tests_that_do_not_run_in_the_workspace_end_the_run_saying_why(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    # a helper the tests import exists only in the working tree, not in the commit
    write(repo / "tests/test_bot.py", "import helper_never_committed\n" + TESTS)
    write(repo / "tests/helper_never_committed.py", "")
    user_git(repo, "add", "tests/test_bot.py")
    user_git(repo, "commit", "--quiet", "-m", "use a helper")
    refs_before = ledger_refs(repo)

    result = evolve(repo)

    assert result.returncode == 1, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "error"
    assert "the tests do not run in the sandboxed workspace" in report["error"]
    assert "helper_never_committed" in report["error"]
    assert report["calls"] == 0
    # nothing was measured: null, not 0.0, and said so
    assert report["reward_before"] is None
    assert report["reward_after"] is None
    assert report["eval_reward_before"] is None
    assert all(row["before"] is None for row in report["tasks"])
    assert "reward    not measured" in result.stdout
    assert "baseline  reward" not in result.stdout
    # the branches it created at the start are gone again; the user's refs are as they were
    assert ledger_refs(repo) == refs_before
    assert "refs/heads/agentdescent/dev" not in ledger_refs(repo)
    assert "UncommittedChanges" not in result.stderr


def test_the_closing_line_counts_the_sandboxed_test_runs(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    make_agent_repo(repo)

    result = evolve(repo, "--evolve-rounds", "1", "--evolve-dry-run")

    assert result.returncode == 0, explain(result)
    report = report_of(repo)
    runs = report["test_runs"]
    assert runs >= 10  # 10 tasks and the guard, twice each for the baseline at least
    last = result.stdout.strip().splitlines()[-1]
    assert f"{runs} sandboxed test runs in" in last, last
    assert "no tests ran" not in last
    assert report["baseline_seconds"] > 0
    assert "baseline  reward 0.000  (" in result.stdout


def test_a_hook_that_raises_ends_the_run_with_exit_1_and_a_report(tmp_path: Path) -> None:
    repo = tmp_path / "agent"
    base = make_agent_repo(repo, proposer=(
        "def pytest_evolve_propose(context):\n    raise KeyError('no such rule')\n"))

    result = evolve(repo)

    assert result.returncode == 1, explain(result)
    report = report_of(repo)
    assert report["stop_reason"] == "error"
    assert "pytest_evolve_propose raised KeyError" in report["error"]
    assert report["reward_before"] == 0.0
    assert ledger_refs(repo)["refs/heads/agentdescent/dev"] == base
    assert "error     " in result.stdout
    assert "KeyError" in result.stdout


def test_the_children_load_the_plugins_the_command_line_chose(tmp_path: Path) -> None:
    # the baseline is what `pytest -p no:junitxml` says, not what a child with every
    # plugin loaded says
    repo = tmp_path / "agent"
    make_agent_repo(repo)
    write(repo / "tests/test_plugins.py",
          "import pytest\n\n\n@pytest.mark.evolve\n"
          "def test_junitxml_is_off(request):\n"
          "    assert not request.config.pluginmanager.has_plugin('junitxml')\n")
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "a test of the plugin set")

    plain = subprocess.run([sys.executable, "-m", "pytest", *LEAN, "-p", "no:junitxml"],
                           cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    result = evolve(repo, "--evolve-rounds", "1", "--evolve-dry-run", "-p", "no:junitxml")

    assert result.returncode == 0, explain(result)
    assert "evolve: 10 tasks, reward 0.100" in plain.stdout, explain(plain)
    assert "baseline  reward 0.100  (" in result.stdout, explain(result)
