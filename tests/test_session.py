"""The ``--evolve`` controller before anything is evaluated: collection, the split, usage errors.

These run pytest in-process (pytester) on a real git repository in a
temporary folder; none of them starts a child pytest, so each is quick.  The
runs that evolve something are in ``test_session_runs.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import user_git

from agentdescent_core.loop.result import RoundInfo
from pytest_agentdescent.collect import (
    RepoLayout,
    collect_tasks,
    ensure_state_dir,
    find_layout,
    holdout_draw,
)
from pytest_agentdescent.terminal import evolved_diff, round_line

PROPOSER = """
def pytest_evolve_propose(context):
    return None
"""

TESTS = """
import pytest

@pytest.mark.evolve
@pytest.mark.parametrize("n", range(10))
def test_task(n):
    assert n >= 0

@pytest.mark.evolve(holdout=True)
def test_held():
    pass

@pytest.mark.evolve(weight=2.0, holdout=False)
def test_heavy():
    pass

@pytest.mark.evolve_guard
def test_guard():
    pass

def test_plain():
    pass
"""


def commit_all(path: Path) -> str:
    if not (path / ".git").exists():
        user_git(path, "init", "--quiet", "--initial-branch=main")
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "agent")
    return user_git(path, "rev-parse", "HEAD")


@pytest.fixture
def agent_repo(pytester: pytest.Pytester) -> Path:
    """A committed agent repository: skills/, tests/, a conftest with a proposer hook."""
    pytester.makepyfile(conftest=PROPOSER)
    (pytester.path / "skills" / "greet").mkdir(parents=True)
    (pytester.path / "skills" / "greet" / "SKILL.md").write_text("# Greet\n")
    (pytester.path / "skills" / "greet" / "test_inside.py").write_text(
        "def test_inside():\n    pass\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_bot.py").write_text(TESTS)
    commit_all(pytester.path)
    return pytester.path


def refs(path: Path) -> str:
    return user_git(path, "for-each-ref", "--format=%(refname) %(objectname)")


# ---------------------------------------------------------------- --collect-only


def test_collect_only_lists_tasks_guards_split_and_frozen_roots(
        pytester: pytest.Pytester, agent_repo: Path) -> None:
    before = refs(agent_repo)
    result = pytester.runpytest("--evolve", "skills", "--collect-only", "-q",
                                "--evolve-frozen", "skills/*/LICENSE", "-p", "no:cacheprovider")
    assert result.ret == 0
    out = result.stdout.str()
    held_by_hash = sorted(f"tests/test_bot.py::test_task[{n}]" for n in range(10)
                          if holdout_draw(f"tests/test_bot.py::test_task[{n}]") < 0.25)
    assert held_by_hash, "the fixture should hold some tasks out by hash"
    result.stdout.fnmatch_lines([
        "*agentdescent evolve*",
        "artifact: skills",
        "tasks: 12 (*train, *holdout)",
        "  holdout tests/test_bot.py::test_held",
        "  train   tests/test_bot.py::test_heavy  weight 2",
        "guards: 1",
        "  guard   tests/test_bot.py::test_guard",
        f"holdout: {len(held_by_hash) + 1} of 12 tasks ({len(held_by_hash)} by node-id hash at "
        "25%, 1 by marker)",
        "frozen: everything outside skills, plus:",
        "*test modules anywhere, even inside the roots (skills/greet/test_inside.py)",
        "  skills/*/LICENSE",
    ])
    for nodeid in held_by_hash:
        assert f"  holdout {nodeid}" in out
    assert "tests/test_bot.py::test_plain" not in out.split("agentdescent evolve")[1]
    # nothing was evaluated, nothing written
    assert refs(agent_repo) == before
    assert not (agent_repo / ".agentdescent").exists()
    assert "agentdescent" not in (agent_repo / ".git/info/exclude").read_text()


def test_small_suites_get_no_implicit_holdout_and_one_warning(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest=PROPOSER, test_few="""
        import pytest

        @pytest.mark.evolve
        @pytest.mark.parametrize("n", range(5))
        def test_task(n):
            pass
    """)
    (pytester.path / "skills").mkdir()
    (pytester.path / "skills" / "a.md").write_text("a\n")
    commit_all(pytester.path)
    result = pytester.runpytest("--evolve", "skills", "--co", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "tasks: 5 (5 train, 0 holdout)",
        "warning: only 5 task(s) (< 8): no implicit holdout*",
    ])
    assert result.stdout.str().count("warning: only 5") == 1


def test_ini_holdout_fraction_and_paths(pytester: pytest.Pytester) -> None:
    pytester.makeini("""
        [pytest]
        evolve_paths = skills
        evolve_holdout = 0
    """)
    pytester.makepyfile(conftest=PROPOSER, test_many="""
        import pytest

        @pytest.mark.evolve
        @pytest.mark.parametrize("n", range(12))
        def test_task(n):
            pass
    """)
    (pytester.path / "skills").mkdir()
    (pytester.path / "skills" / "a.md").write_text("a\n")
    commit_all(pytester.path)
    result = pytester.runpytest("--co", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["artifact: skills", "tasks: 12 (12 train, 0 holdout)",
                                 "holdout: 0 of 12 tasks"])


def test_collect_only_in_a_monorepo_names_paths_from_the_repository_root(
        pytester: pytest.Pytester) -> None:
    project = pytester.path / "apps" / "bot"
    (project / "skills").mkdir(parents=True)
    (project / "skills" / "rules.md").write_text("rules\n")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(PROPOSER)
    (project / "test_bot.py").write_text(
        "import pytest\n\n@pytest.mark.evolve\ndef test_bot():\n    pass\n")
    commit_all(pytester.path)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        result = pytester.runpytest("--evolve", "skills", "--co", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["artifact: apps/bot/skills", "  train   test_bot.py::test_bot"])


# ---------------------------------------------------------------- usage errors


def test_no_proposer_is_a_usage_error_saying_what_to_implement(
        pytester: pytest.Pytester, agent_repo: Path) -> None:
    (agent_repo / "conftest.py").write_text("")
    commit_all(agent_repo)
    before = refs(agent_repo)
    result = pytester.runpytest("--evolve", "skills", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*implement pytest_evolve_propose in conftest.py "
                                 "or give a model with --evolve-model*"])
    assert refs(agent_repo) == before


def test_a_model_without_its_key_is_a_usage_error_naming_the_variable(
        pytester: pytest.Pytester, agent_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    before = refs(agent_repo)
    result = pytester.runpytest("--evolve", "skills", "--evolve-model", "openai:gpt-x",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--evolve-model openai:gpt-x needs OPENAI_API_KEY*"])
    assert refs(agent_repo) == before


def test_no_marked_test_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest=PROPOSER, test_plain="def test_plain():\n    pass\n")
    (pytester.path / "skills").mkdir()
    (pytester.path / "skills" / "a.md").write_text("a\n")
    commit_all(pytester.path)
    result = pytester.runpytest("--evolve", "skills", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*found no task: mark the tests*@pytest.mark.evolve*"])


def test_outside_a_git_repository_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest=PROPOSER, test_a="""
        import pytest

        @pytest.mark.evolve
        def test_a():
            pass
    """)
    (pytester.path / "skills").mkdir()
    result = pytester.runpytest("--evolve", "skills", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*needs a git repository*run `git init`*"])


def test_a_path_holding_the_whole_project_is_refused(
        pytester: pytest.Pytester, agent_repo: Path) -> None:
    result = pytester.runpytest("--evolve", ".", "--co", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*contains the whole project*point it at the folder*"])


def test_a_repository_without_commits_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest=PROPOSER, test_a="""
        import pytest

        @pytest.mark.evolve
        def test_a():
            pass
    """)
    (pytester.path / "skills").mkdir()
    (pytester.path / "skills" / "a.md").write_text("a\n")
    user_git(pytester.path, "init", "--quiet")
    result = pytester.runpytest("--evolve", "skills", "--evolve-sandbox", "local",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no commits yet*commit your files first*"])


# ---------------------------------------------------------------- the parts


def test_holdout_draw_is_fixed_by_the_node_id() -> None:
    first = holdout_draw("tests/test_bot.py::test_a[1]")
    assert first == holdout_draw("tests/test_bot.py::test_a[1]")
    assert 0.0 <= first < 1.0
    draws = [holdout_draw(f"tests/test_x.py::test_{i}") for i in range(2000)]
    share = sum(d < 0.25 for d in draws) / len(draws)
    assert 0.22 < share < 0.28  # a uniform draw, so the fraction is what evolve_holdout says


def test_collect_tasks_without_items_has_nothing_to_say() -> None:
    assert collect_tasks([], 0.25) == ([], [], [])


def test_state_dir_is_listed_in_info_exclude_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    user_git(repo, "init", "--quiet")
    (repo / "a.txt").write_text("a\n")
    user_git(repo, "add", "-A")
    user_git(repo, "commit", "--quiet", "-m", "a")
    layout = find_layout(repo)
    assert layout == RepoLayout(root=repo.resolve(), subdir="",
                                common_dir=(repo / ".git").resolve())
    status = user_git(repo, "status", "--porcelain")
    for _ in range(2):
        state = ensure_state_dir(layout, ".agentdescent")
        (state / "report.json").write_text("{}\n")
    exclude = (repo / ".git/info/exclude").read_text()
    assert exclude.count("/.agentdescent/") == 1
    assert user_git(repo, "status", "--porcelain") == status


def test_evolved_diff_is_a_unified_diff_per_file() -> None:
    lines = evolved_diff({"skills/a.md": "one\n", "skills/gone.md": "x\n"},
                         {"skills/a.md": "one\ntwo\n", "skills/new.md": "n\n"})
    assert lines[:2] == ["--- a/skills/a.md", "+++ b/skills/a.md"]
    assert "+two" in lines
    assert "--- a/skills/gone.md" in lines
    assert "+++ /dev/null" in lines
    assert "--- /dev/null" in lines
    assert "+++ b/skills/new.md" in lines


def test_round_line_says_reward_change_decision_and_calls() -> None:
    accepted = RoundInfo(round=2, reward=0.75, version=3, merged=1, reasons={"committed": 1},
                         seconds=1.5)
    line = round_line(accepted, total=10, previous=0.5, calls=2, elapsed=3.25)
    assert line.startswith("round  2/10  reward 0.750 (+0.250)")
    assert "accepted v3" in line
    assert "calls 2" in line
    # the round's own seconds (as report.json has them), then the running total
    assert line.endswith("   1.5s (total 3.2s)")
    rejected = RoundInfo(round=3, reward=0.75, version=3,
                         reasons={"below-threshold": 1, "frozen-violation": 1}, proposals=2)
    line = round_line(rejected, total=10, previous=0.75, calls=2, elapsed=4.0)
    assert "rejected: below-threshold x1, frozen-violation x1" in line
    assert "(+" not in line


def test_the_plugin_accepts_on_every_task_and_only_hides_the_holdout() -> None:
    from agentdescent_core.evaluation.protocol import TaskSplit

    split = TaskSplit(train=("a", "b"), held_out=("c",), guards=("g",), eval_on_all=True)
    assert split.eval_tasks == ("a", "b", "c")
    assert TaskSplit(train=("a", "b"), held_out=("c",)).eval_tasks == ("c",)


def test_network_none_under_the_local_sandbox_is_refused_before_any_ref_moves(
        pytester: pytest.Pytester, agent_repo: Path) -> None:
    before = refs(agent_repo)
    result = pytester.runpytest("--evolve", "skills", "--evolve-sandbox", "local",
                                "--evolve-network", "none", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--evolve-network none needs a sandbox that can cut the "
                                 "network*bwrap or docker*"])
    assert refs(agent_repo) == before


# ---------------------------------------------------------------- --evolve-tasks

SELECTABLE = """
import pytest

def test_humanize_words():
    pass

def test_humanize_numbers():
    assert False

@pytest.mark.slow
def test_slow_path():
    pass

@pytest.mark.evolve(weight=3.0)
def test_marked_humanize():
    pass

def test_other():
    pass
"""


def test_evolve_tasks_selects_tasks_like_k_in_plain_and_evolve_runs(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest=PROPOSER)
    pytester.makeini("[pytest]\nmarkers = slow\nevolve_tasks = humanize or slow\n")
    (pytester.path / "skills").mkdir()
    (pytester.path / "skills" / "notes.md").write_text("notes\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_sel.py").write_text(SELECTABLE)
    commit_all(pytester.path)
    plain = pytester.runpytest("-p", "no:cacheprovider")
    # words, the slow marker; the marked test keeps its weight 3: (1 + 0 + 1 + 3) / 6
    plain.stdout.fnmatch_lines(["evolve: 4 tasks, reward 0.833"])
    listed = pytester.runpytest("--evolve", "skills", "--collect-only", "-q",
                                "-p", "no:cacheprovider")
    out = listed.stdout.str()
    listed.stdout.fnmatch_lines(["tasks: 4 *"])
    assert "test_other" not in out.split("agentdescent evolve")[1]
    assert "train   tests/test_sel.py::test_marked_humanize  weight 3" in out
    narrowed = pytester.runpytest("-p", "no:cacheprovider", "--evolve-tasks", "slow")
    narrowed.stdout.fnmatch_lines(["evolve: 2 tasks, reward 1.000"])


def test_a_bad_evolve_tasks_expression_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--evolve-tasks", "humanize and (")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --evolve-tasks must be a -k style expression*"
                                 "got 'humanize and ('*"])
