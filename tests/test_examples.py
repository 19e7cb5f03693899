"""The offline example, examples/support-bot: it fails today, and evolving fixes it.

Three layers, cheapest first:

* the bot and the coach (its ``pytest_evolve_propose``) as plain functions;
* the coach against real failures: the example's suite runs as a child
  pytest with the evaluation's own recorder (``pytest_agentdescent.recorder``),
  the failing *train* tasks go to the coach, its edits are written, and the
  suite runs again — holdout tasks never reach it and must pass anyway;
* the README's main-job command, ``pytest --evolve skills/ --evolve-dry-run``,
  read from the README and run as written (``tests/test_docs.py`` leaves it
  here), in a clone of this repository made in tmp_path (the example lives
  inside the project's repository, a monorepo layout), so the checkout running
  these tests is never the repository being evolved.

Every run works on a copy of the example; the example's files are never edited.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import clone_working_tree, user_git

from agentdescent_core.evaluation.journal import RECORD_ENV
from pytest_agentdescent.hooks import Failure, ProposeContext

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "support-bot"
TESTS = "tests/test_support_bot.py"
IGNORED = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".agentdescent")


# ------------------------------------------------------------------ helpers

@pytest.fixture(scope="module")
def bot() -> Iterator[tuple[ModuleType, ModuleType]]:
    """The example's ``agent`` and ``coach`` modules, imported from the example folder.

    They are top-level modules there (as in a user's repository), so they are
    imported under their own names and removed again afterwards; the other
    example has an ``agent`` module too.
    """
    saved: dict[str, ModuleType] = {
        name: sys.modules.pop(name) for name in ("agent", "coach") if name in sys.modules
    }
    sys.path.insert(0, str(EXAMPLE))
    try:
        modules = []
        for name in ("agent", "coach"):
            spec = importlib.util.spec_from_file_location(name, EXAMPLE / f"{name}.py")
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            modules.append(module)
        yield modules[0], modules[1]
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in ("agent", "coach"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def copy_example(tmp_path: Path) -> Path:
    target = tmp_path / "support-bot"
    shutil.copytree(EXAMPLE, target, ignore=IGNORED)
    return target


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("AGENTDESCENT_CHILD", None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run_recorded(example: Path, journal: Path) -> dict[str, dict[str, Any]]:
    """One run of the example's suite with the evaluation's recorder: nodeid -> record."""
    journal.unlink(missing_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_agentdescent.recorder", "-q",
         "--no-header", "-rN", "-p", "no:cacheprovider", TESTS],
        cwd=example, env={**child_env(), RECORD_ENV: str(journal)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    lines = [json.loads(line) for line in journal.read_text("utf-8").splitlines()]
    return {line["nodeid"]: line for line in lines if "outcome" in line}


def holdout_functions(test_file: Path) -> set[str]:
    """Names of the test functions marked ``evolve(holdout=True)``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(test_file.read_text("utf-8"))):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if (isinstance(deco, ast.Call) and ast.unparse(deco.func) == "pytest.mark.evolve"
                    and any(k.arg == "holdout" and ast.unparse(k.value) == "True"
                            for k in deco.keywords)):
                found.add(node.name)
    return found


def asked_questions(test_file: Path) -> list[str]:
    """Every customer message the tests send: ``answer("...")`` and parametrize values."""
    found: list[str] = []
    for node in ast.walk(ast.parse(test_file.read_text("utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name == "answer" and node.args:
            values = [node.args[0]]
        elif name == "pytest.mark.parametrize" and isinstance(node.args[1], ast.List):
            values = node.args[1].elts
        else:
            continue
        found += [v.value for v in values
                  if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return found


def function_of(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


def skill_files(example: Path, prefix: str = "") -> dict[str, str]:
    return {prefix + p.relative_to(example).as_posix(): p.read_text("utf-8")
            for p in sorted((example / "skills").glob("*/SKILL.md"))}


def as_failure(record: Mapping[str, Any]) -> Failure:
    return Failure(nodeid=record["nodeid"], outcome=record["outcome"],
                   reward=float(record["reward"] or 0.0), message=record["message"],
                   output=record["output"], source="")


# ------------------------------------------------------------------ the bot and the coach

def test_the_bot_answers_from_its_skill_files(bot: tuple[ModuleType, ModuleType],
                                              tmp_path: Path) -> None:
    agent, _ = bot
    skills = tmp_path / "skills"
    (skills / "pets").mkdir(parents=True)
    (skills / "pets" / "SKILL.md").write_text(
        "greeting: Hi!\nsign-off: Bye\nfallback: No idea.\nnever: bite\n"
        "- cats, dog food -> Cats sleep a lot.\n- dog -> Dogs bite sometimes.\n",
        encoding="utf-8",
    )
    assert agent.answer("Do my cat and dog get on?", skills) == "Hi!\nCats sleep a lot.\nBye"
    assert agent.answer("Where is the dog food?", skills) == "Hi!\nCats sleep a lot.\nBye"
    assert agent.answer("Tell me about birds", skills) == "Hi!\nNo idea.\nBye"


def test_the_coach_ignores_what_it_cannot_read(bot: tuple[ModuleType, ModuleType]) -> None:
    _, coach = bot
    files = skill_files(EXAMPLE)
    assert coach.propose(files, []) is None
    unreadable = Failure("t::a", "error", 0.0, "ZeroDivisionError: division by zero", "", "")
    assert coach.propose(files, [unreadable]) is None
    # the bot never said 'Good morning': nothing in the skills to replace
    unknown = Failure("t::b", "failed", 0.0,
                      "AssertionError: assert 'Good morning' == 'Hi there!'\n"
                      "  \n  - Hi there!\n  + Good morning", "", "")
    assert coach.propose(files, [unknown]) is None


def test_the_coach_reads_a_rewritten_message_without_its_crash_line(
    bot: tuple[ModuleType, ModuleType],
) -> None:
    _, coach = bot
    message = (
        "    def test_x() -> None:\n"
        ">       assert 'Hello.' == 'Hi there!'\n"
        "E       AssertionError: assert 'Hello.' == 'Hi there!'\n"
        "E         \n"
        "E         - Hi there!\n"
        "E         + Hello.\n"
    )
    lesson = coach.read_lesson(message, "")
    assert (lesson.kind, lesson.old, lesson.text) == ("replace", "Hello.", "Hi there!")


# ------------------------------------------------------------------ against real failures

def test_plain_pytest_shows_the_failing_baseline(tmp_path: Path) -> None:
    example = copy_example(tmp_path)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
                          cwd=example, env=child_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1, done.stdout[-2000:]
    assert re.search(r"\b16 failed, 3 passed\b", done.stdout), done.stdout[-2000:]
    # 2 of 18 tasks pass; one failing task has weight 2, so 2 / 19
    assert "evolve: 18 tasks, reward 0.105" in done.stdout


def test_the_example_has_tasks_parametrized_cases_holdouts_and_a_guard(tmp_path: Path) -> None:
    records = run_recorded(copy_example(tmp_path), tmp_path / "journal.jsonl")
    holdout = holdout_functions(EXAMPLE / TESTS)
    guards = [n for n in records if function_of(n) == "test_skills_are_well_formed"]
    tasks = [n for n in records if n not in guards]
    assert len(tasks) >= 10
    assert len(guards) == 1
    assert sum("[" in n for n in tasks) >= 4, "some tasks are parametrized"
    assert 3 <= sum(function_of(n) in holdout for n in tasks) < len(tasks) // 2
    assert len(skill_files(EXAMPLE)) >= 4


def test_the_coach_fixes_every_task_from_the_train_failures_alone(
    bot: tuple[ModuleType, ModuleType], tmp_path: Path,
) -> None:
    _, coach = bot
    example = copy_example(tmp_path)
    journal = tmp_path / "journal.jsonl"
    holdout = holdout_functions(example / TESTS)
    before = skill_files(example)
    history: list[int] = []
    for _ in range(4):
        records = run_recorded(example, journal)
        failing = [r for r in records.values() if r["outcome"] != "passed"]
        history.append(len(failing))
        if not failing:
            break
        train = [as_failure(r) for r in failing if function_of(r["nodeid"]) not in holdout]
        assert train, "only holdout tasks fail, so nothing can be learned"
        files = skill_files(example)
        edits = coach.propose(files, train)
        assert edits, f"the coach learned nothing from {[f.nodeid for f in train]}"
        assert set(edits) <= set(files), "the coach edits only existing skill files"
        for rel, text in edits.items():
            assert text is not None
            (example / rel).write_text(text, encoding="utf-8")
    assert history[0] == 16, history
    assert history[-1] == 0, history
    assert len(history) <= 3, f"failing tests per round: {history}"

    after = skill_files(example)
    # General rules, not memorised questions: no question of a holdout task was
    # shown to the coach, and no test's question is copied into a skill.
    questions = asked_questions(example / TESTS)
    assert len(questions) >= 15
    for text in after.values():
        for question in questions:
            assert question not in text
    # what it learned is readable: corrected facts, new rules, a synonym, tone
    learned = "\n".join(after.values())
    assert "- refund -> Refunds are accepted within 30 days of delivery." in learned
    assert "- parcel, track -> Track your parcel" in learned
    assert "greeting: Hi there!" in learned
    assert "never: guarantee" in learned
    assert after != before


def test_the_hook_in_conftest_returns_the_coachs_edits(tmp_path: Path) -> None:
    """The conftest's hook is the coach behind a ProposeContext, with repo-relative paths."""
    example = copy_example(tmp_path)
    records = run_recorded(example, tmp_path / "journal.jsonl")
    failures = tuple(as_failure(r) for r in records.values()
                     if function_of(r["nodeid"]) in {"test_greeting", "test_sign_off"})
    prefix = "examples/support-bot/"
    files = skill_files(example, prefix)
    context = ProposeContext(files=files, roots=(prefix + "skills",), failures=failures,
                             round=1, worker="worker-0", version=0, rng=random.Random(0))
    spec = importlib.util.spec_from_file_location("support_bot_conftest", example / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    saved: dict[str, ModuleType] = {
        name: sys.modules.pop(name) for name in ("agent", "coach") if name in sys.modules
    }
    try:
        spec.loader.exec_module(conftest)
        edits = conftest.pytest_evolve_propose(context)
    finally:
        sys.path[:] = [p for p in sys.path if p != str(example)]
        for name in ("agent", "coach"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    assert set(edits) == {prefix + "skills/tone/SKILL.md"}
    tone = edits[prefix + "skills/tone/SKILL.md"]
    assert "greeting: Hi there!\nsign-off: Best wishes, the Support Team\n" in tone


# ------------------------------------------------------------------ the main-job command

def clone_project(tmp_path: Path) -> Path:
    """This repository as a fresh clone would have it, including uncommitted work."""
    return clone_working_tree(ROOT, tmp_path / "project")


def readme_main_job() -> tuple[str, list[str]]:
    """Where the README's main-job command runs (``cd DIR``) and its pytest command line.

    ``tests/test_docs.py`` leaves this command to the test below, so it is run
    here exactly as the README writes it, minus the install step (done already:
    ``test_docs.runnable`` drops it, as it does for every documented command).
    """
    from test_docs import main_job_command, runnable

    command = main_job_command()
    assert command is not None, "README lost the offline example command"
    steps = (runnable(command) or "").split(" && ")
    assert len(steps) == 2, steps
    cd, pytest_command = steps
    assert cd.startswith("cd "), steps
    return cd.removeprefix("cd ").strip(), shlex.split(pytest_command)


@pytest.mark.slow
def test_evolve_dry_run_reaches_full_reward_in_a_clone(tmp_path: Path) -> None:
    pytest.importorskip("pytest_agentdescent.session")
    clone = clone_project(tmp_path)
    refs_before = user_git(clone, "for-each-ref", "--format=%(refname) %(objectname)")
    folder, argv = readme_main_job()
    assert folder == "examples/support-bot"
    assert argv[:3] == ["python", "-m", "pytest"]
    assert "--evolve-dry-run" in argv  # the clone's refs are checked below
    done = subprocess.run(
        argv, cwd=clone / folder, env=child_env(),
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    report = json.loads((clone / ".agentdescent" / "report.json").read_text("utf-8"))
    assert report["reward_before"] < 0.2
    assert report["reward_after"] == 1.0, done.stdout[-4000:]
    assert report["accepted"] >= 1
    assert report["rounds"] <= 3, "the example should converge within a few rounds"
    assert report["holdout"]["reward_after"] == 1.0, "the paraphrases were never shown"
    assert report["error"] is None
    assert all(t["after"] == 1.0 for t in report["tasks"])
    assert re.search(r"reward\s+0\.105 -> 1\.000", done.stdout), done.stdout[-4000:]
    # a dry run: no ref of the clone changed, its working tree is as it was
    assert user_git(clone, "for-each-ref", "--format=%(refname) %(objectname)") == refs_before
    assert user_git(clone, "status", "--porcelain") == ""
