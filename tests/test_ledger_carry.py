"""Carrying evolved artifact files onto a base branch that moved since dev was cut."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SKILL_TEXT, UserRepo, user_git

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import LedgerError
from agentdescent_core.ledger import Ledger, plan_carry

SKILL = "skills/greet/SKILL.md"


def make_tree() -> FileTree:
    return FileTree(["skills", "AGENTS.md"])


def skill(**replace: str) -> str:
    """SKILL_TEXT with some of its lines replaced (keys: say, use, brief, end)."""
    lines = {"say": "Say hello.", "use": "Use the user's name.", "brief": "Be brief.",
             "end": "End politely."}
    text = SKILL_TEXT
    for key, new in replace.items():
        text = text.replace(lines[key], new)
    return text


def parents(user: UserRepo, rev: str) -> list[str]:
    return user.git("rev-list", "--parents", "-n", "1", rev).split()[1:]


def show(user: UserRepo, rev: str, path: str) -> str:
    return str(user.repo.git.show(f"{rev}:{path}", strip_newline_in_stdout=False))


# ---------------------------------------------------------------- merging


def test_base_moved_without_overlap_is_merged(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        v1 = led.commit(Diff({SKILL: skill(say="Say hello warmly."),
                              "skills/greet/examples.md": "Hello, Ada!\n"}))
        v2 = led.commit(Diff({"AGENTS.md": "# Agents\n\nBe helpful and kind.\n"}))
        new_base = user_repo.commit_on_main(
            {SKILL: skill(end="End with a smile."),
             "tests/test_agent.py": "def test_agent():\n    assert 1\n",
             "docs/guide.md": "guide\n"},
            "user work on main",
        )
        before = user_repo.snapshot()
        head_before = user_repo.head_state()
        refs_before = user_repo.other_refs()

        result = led.ensure_branches()

        assert user_repo.snapshot() == before
        assert user_repo.head_state() == head_before
        assert user_repo.other_refs() == refs_before
        assert result.base == new_base
        assert result.carried == ("agentdescent/dev",)
        assert result.merged == (SKILL,)
        assert result.conflicts == ()
        assert result.dev_version == 3
        assert result.stable == new_base  # nothing was promoted: stable follows the base
        dev = result.dev
        assert parents(user_repo, dev) == [new_base, v2.sha]
        # The carried tree: the new base plus the evolved (and merged) artifact files.
        assert show(user_repo, dev, SKILL) == skill(say="Say hello warmly.",
                                                   end="End with a smile.")
        assert show(user_repo, dev, "skills/greet/examples.md") == "Hello, Ada!\n"
        assert show(user_repo, dev, "AGENTS.md") == "# Agents\n\nBe helpful and kind.\n"
        assert show(user_repo, dev, "tests/test_agent.py").endswith("assert 1\n")
        assert show(user_repo, dev, "docs/guide.md") == "guide\n"
        record = led.history()[-1]
        assert record.carried_from == v2.sha
        assert record.subject.startswith("agentdescent: v3 carry agentdescent/dev v2")
        assert [r.version for r in led.history()] == [0, 3]
        assert led.history()[0].sha == new_base
        # Nothing is rewritten: the earlier versions stay reachable.
        log = user_repo.repo.git.log("--format=%H", f"{new_base}..agentdescent/dev").split()
        assert log == [dev, v2.sha, v1.sha]
        assert user_repo.repo.git.log("--first-parent", "--format=%H",
                                      f"{new_base}..agentdescent/dev").split() == [dev]

        again = led.ensure_branches()
        assert again.resumed
        assert again.carried == ()
        assert again.dev == dev
        v4 = led.commit(Diff({"skills/greet/more.md": "more\n"}))
        assert v4.version == 4
        assert parents(user_repo, v4.sha) == [dev]


def test_same_lines_changed_is_a_reported_conflict_and_base_kept(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        v1 = led.commit(Diff({SKILL: skill(use="Use the user's first name."),
                              "AGENTS.md": "# Agents\n\nBe helpful.\nCite sources.\n"}))
        new_base = user_repo.commit_on_main(
            {SKILL: skill(use="Use the user's full name."),
             "AGENTS.md": "# Agents v2\n\nBe helpful.\n"},
            "conflicting edit",
        )
        before = user_repo.snapshot()
        result = led.ensure_branches()
        assert user_repo.snapshot() == before

    assert result.carried == ("agentdescent/dev",)
    assert result.merged == ("AGENTS.md",)
    assert [c.path for c in result.conflicts] == [SKILL]
    conflict = result.conflicts[0]
    assert conflict.branch == "agentdescent/dev"
    assert conflict.evolved_commit == v1.sha
    assert SKILL in conflict.message
    assert "kept the base branch's version" in conflict.message
    assert f"git show {v1.sha[:12]}:{SKILL}" in conflict.message
    assert any(SKILL in m for m in result.messages)
    assert show(user_repo, result.dev, SKILL) == skill(use="Use the user's full name.")
    assert show(user_repo, result.dev, "AGENTS.md") == "# Agents v2\n\nBe helpful.\nCite sources.\n"
    message = user_repo.repo.git.log("-1", "--format=%B", result.dev)
    assert f"Agentdescent-Carry-Conflict: {SKILL}" in message
    assert f"Agentdescent-Carry: {v1.sha}" in message
    assert result.base == new_base


def test_delete_against_edit_conflicts_keep_the_base(clean_user_repo: UserRepo):
    user = clean_user_repo
    with Ledger(user.path, make_tree()) as led:
        led.ensure_branches()
        led.commit(Diff({SKILL: skill(brief="Be very brief."),
                         "skills/farewell/SKILL.md": None}))
        user.commit_on_main(
            {SKILL: None, "skills/farewell/SKILL.md": "# Farewell\n\nWave.\n"}, "user change",
        )
        result = led.ensure_branches()
    reasons = {c.path: c.reason for c in result.conflicts}
    assert set(reasons) == {SKILL, "skills/farewell/SKILL.md"}
    assert "base branch deleted it" in reasons[SKILL]
    assert "ledger deleted it" in reasons["skills/farewell/SKILL.md"]
    files = user.git("ls-tree", "-r", "--name-only", result.dev).split()
    assert SKILL not in files
    assert show(user, result.dev, "skills/farewell/SKILL.md") == "# Farewell\n\nWave.\n"


def test_stable_behind_dev_is_carried_and_stays_on_dev(clean_user_repo: UserRepo):
    user = clean_user_repo
    with Ledger(user.path, make_tree()) as led:
        led.ensure_branches()
        v1 = led.commit(Diff({"skills/greet/a.md": "a\n"}))
        v2 = led.commit(Diff({"skills/greet/b.md": "b\n"}))
        led.promote(1)
        new_base = user.commit_on_main({"README.md": "# Demo v2\n"}, "docs")
        result = led.ensure_branches()
        assert result.carried == ("agentdescent/stable", "agentdescent/dev")
        history = led.history()
        assert [r.version for r in history] == [0, 3, 4]
        stable_carry, dev_carry = history[1].sha, history[2].sha
        assert result.stable == stable_carry
        assert result.dev == dev_carry
        assert parents(user, stable_carry) == [new_base, v1.sha]
        assert parents(user, dev_carry) == [stable_carry, v2.sha]
        assert set(led.read_state("agentdescent/stable")) >= {"skills/greet/a.md"}
        assert "skills/greet/b.md" not in led.read_state("agentdescent/stable")
        assert {"skills/greet/a.md", "skills/greet/b.md"} <= set(led.read_state(4))
        assert show(user, "agentdescent/stable", "README.md") == "# Demo v2\n"
        assert led.promote().sha == dev_carry


def test_stable_equal_to_dev_gets_the_same_carry_commit(clean_user_repo: UserRepo):
    user = clean_user_repo
    with Ledger(user.path, make_tree()) as led:
        led.ensure_branches()
        led.commit(Diff({"skills/greet/a.md": "a\n"}))
        led.promote()
        user.commit_on_main({"README.md": "# Demo v2\n"}, "docs")
        result = led.ensure_branches()
    assert result.carried == ("agentdescent/dev",)
    assert result.stable == result.dev
    assert result.dev_version == 2


def test_nothing_evolved_yet_just_follows_the_base(clean_user_repo: UserRepo):
    user = clean_user_repo
    with Ledger(user.path, make_tree()) as led:
        led.ensure_branches()
        new_base = user.commit_on_main({"README.md": "# Demo v2\n"}, "docs")
        result = led.ensure_branches()
    assert result.carried == ()
    assert not result.created
    assert result.dev == result.stable == new_base


def test_merged_pull_request_of_stable_carries_cleanly(clean_user_repo: UserRepo):
    """The usual cycle: the stable PR is merged into main while dev evolved further."""
    user = clean_user_repo
    with Ledger(user.path, make_tree()) as led:
        led.ensure_branches()
        led.commit(Diff({SKILL: skill(say="Say hello warmly.")}))
        led.promote()
        led.commit(Diff({SKILL: skill(say="Say hello warmly.", end="End with a smile.")}))
        user.git("merge", "--quiet", "--no-ff", "-m", "Merge agentdescent/stable",
                 "agentdescent/stable")
        result = led.ensure_branches()
        assert result.conflicts == ()
        assert led.read_state("agentdescent/dev")[SKILL] == skill(
            say="Say hello warmly.", end="End with a smile.")
        assert led.read_state("agentdescent/stable")[SKILL] == skill(say="Say hello warmly.")
        assert led.head("stable") in {r.sha for r in led.history()}


def test_only_artifact_files_are_carried(clean_user_repo: UserRepo):
    user = clean_user_repo
    with Ledger(user.path, FileTree(["skills", "src"])) as wide:
        wide.ensure_branches()
        wide.commit(Diff({"src/app.py": "print('evolved')\n", "skills/greet/a.md": "a\n"}))
    user.commit_on_main({"README.md": "# Demo v2\n"}, "docs")
    with Ledger(user.path, make_tree()) as narrow:
        result = narrow.ensure_branches()
        assert result.carried == ("agentdescent/dev",)
    assert show(user, result.dev, "src/app.py") == "print('app')\n"
    assert show(user, result.dev, "skills/greet/a.md") == "a\n"


def test_unrelated_history_is_a_clear_error(clean_user_repo: UserRepo):
    user = clean_user_repo
    with Ledger(user.path, make_tree()) as led:
        led.ensure_branches()
        led.commit(Diff({"skills/greet/a.md": "a\n"}))
        user.git("switch", "--quiet", "--orphan", "elsewhere")
        (user.path / "x.txt").write_text("x\n", encoding="utf-8")
        user.git("add", "x.txt")
        user.git("commit", "--quiet", "-m", "unrelated root")
        before = user.snapshot()
        with pytest.raises(LedgerError, match="shares no history") as err:
            led.ensure_branches()
        assert "git branch -D agentdescent/dev" in str(err.value)
        assert user.snapshot() == before


def test_shallow_clone_needing_a_carry_says_to_fetch_history(
    clean_user_repo: UserRepo, tmp_path: Path
):
    origin = clean_user_repo
    clone = tmp_path / "shallow"
    user_git(tmp_path, "clone", "--quiet", "--depth", "1", f"file://{origin.path}", str(clone))
    with Ledger(clone, make_tree()) as led:
        led.ensure_branches()
        led.commit(Diff({"skills/greet/a.md": "a\n"}))
        origin.commit_on_main({"README.md": "# Demo v2\n"}, "moved on")
        user_git(clone, "fetch", "--quiet", "--depth", "1", "origin", "main")
        with pytest.raises(LedgerError, match="shallow clone") as err:
            led.ensure_branches("origin/main")
        assert "fetch-depth: 0" in str(err.value)
        assert "git fetch --unshallow" in str(err.value)
        user_git(clone, "fetch", "--quiet", "--unshallow", "origin")
        result = led.ensure_branches("origin/main")
        assert result.carried == ("agentdescent/dev",)


# ---------------------------------------------------------------- the per-file plan


def test_plan_carry_decisions():
    ancestor = {"same.md": "a\n", "evolved.md": "a\n", "base.md": "a\n", "both.md": "1\n2\n3\n4\n",
                "gone.md": "g\n", "identical.md": "i\n"}
    base = {"same.md": "a\n", "evolved.md": "a\n", "base.md": "B\n", "both.md": "1\n2\n3\nX\n",
            "gone.md": "g\n", "identical.md": "I\n", "base-new.md": "n\n"}
    evolved = {"same.md": "a\n", "evolved.md": "E\n", "base.md": "a\n",
               "both.md": "Y\n2\n3\n4\n", "identical.md": "I\n", "ledger-new.md": "l\n"}
    plan = plan_carry(ancestor, base, evolved)
    assert plan.ops == {
        "both.md": "Y\n2\n3\nX\n",
        "evolved.md": "E\n",
        "gone.md": None,
        "ledger-new.md": "l\n",
    }
    assert plan.merged == ("both.md",)
    assert plan.conflicts == ()


def test_plan_carry_conflicts():
    ancestor = {"c.md": "a\n", "del-base.md": "d\n", "del-ledger.md": "d\n"}
    base = {"c.md": "b\n", "del-ledger.md": "D\n", "add.md": "x\n"}
    evolved = {"c.md": "c\n", "del-base.md": "E\n", "add.md": "y\n"}
    plan = plan_carry(ancestor, base, evolved)
    assert plan.ops == {}
    assert dict(plan.conflicts) == {
        "add.md": "the base branch and the ledger both added it with different content",
        "c.md": "the base branch and the ledger both changed the same lines",
        "del-base.md": "the base branch deleted it and the ledger edited it",
        "del-ledger.md": "the ledger deleted it and the base branch edited it",
    }
