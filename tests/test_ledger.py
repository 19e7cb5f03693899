"""The git ledger on real repositories: commits, evidence, history, promotion, edge cases."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import git
import pytest
from conftest import SKILL_TEXT, UserRepo, make_user_repo, user_git, write

from agentdescent_core.artifacts.diff import Diff
from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.errors import CasConflictError, LedgerError, RefusalError
from agentdescent_core.ledger import (
    DEFAULT_IDENTITY,
    Evidence,
    Ledger,
    parse_message,
    validate_prefix,
)
from agentdescent_core.ledger.plumbing import GitRepo, RefUpdateFailed


def make_tree() -> FileTree:
    return FileTree(["skills", "AGENTS.md"])


@pytest.fixture
def ledger(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        yield led


def edited_skill(line: str = "Use the user's first name.") -> str:
    return SKILL_TEXT.replace("Use the user's name.", line)


# ---------------------------------------------------------------- branches


def test_ensure_creates_both_branches_at_head(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree()) as led:
        result = led.ensure_branches()
        assert result.created == ("agentdescent/dev", "agentdescent/stable")
        assert result.base == result.dev == result.stable == user_repo.base
        assert result.dev_version == 0
        assert not result.resumed
        again = led.ensure_branches()
    assert again.resumed
    assert again.created == ()
    assert again.carried == ()
    assert user_repo.git("rev-parse", "agentdescent/dev") == user_repo.base
    assert user_repo.git("rev-parse", "agentdescent/stable") == user_repo.base


def test_resume_keeps_existing_versions(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        first = led.commit(Diff({"skills/greet/SKILL.md": edited_skill()}))
    with Ledger(user_repo.path, make_tree()) as led:
        result = led.ensure_branches()
        assert result.resumed
        assert result.dev == first.sha
        assert result.dev_version == 1
        assert result.stable == user_repo.base


def test_missing_stable_is_recreated_at_the_history_base(user_repo: UserRepo, ledger: Ledger):
    ledger.commit(Diff({"skills/greet/SKILL.md": edited_skill()}))
    user_repo.git("branch", "-D", "agentdescent/stable")
    result = ledger.ensure_branches()
    assert result.created == ("agentdescent/stable",)
    assert result.stable == user_repo.base


@pytest.mark.parametrize("prefix", ["", "bad..name/", "a b/", "x/.hidden/", "a~b/", "a:b/"])
def test_invalid_prefix_is_refused(user_repo: UserRepo, prefix: str):
    with pytest.raises(LedgerError, match="prefix"):
        Ledger(user_repo.path, make_tree(), prefix=prefix)


def test_custom_prefix_uses_its_own_refs(user_repo: UserRepo):
    assert validate_prefix("evo/") == "evo/"
    with Ledger(user_repo.path, make_tree(), prefix="evo/") as led:
        led.ensure_branches()
        led.commit(Diff({"skills/greet/SKILL.md": edited_skill()}))
    refs = user_repo.git("for-each-ref", "--format=%(refname)", "refs/heads/evo")
    assert refs.split() == ["refs/heads/evo/dev", "refs/heads/evo/stable"]
    assert "agentdescent" not in user_repo.git("branch", "--list")


def test_prefix_clashing_with_a_user_branch_gets_a_clear_error(clean_user_repo: UserRepo):
    clean_user_repo.git("branch", "agentdescent")
    before = clean_user_repo.snapshot()
    with Ledger(clean_user_repo.path, make_tree()) as led, pytest.raises(
        LedgerError, match="choose another branch prefix"
    ):
        led.ensure_branches()
    assert clean_user_repo.snapshot() == before


# ---------------------------------------------------------------- commits


def test_commit_is_a_real_commit_with_real_file_changes(user_repo: UserRepo, ledger: Ledger):
    result = ledger.commit(Diff(
        {
            "skills/greet/SKILL.md": edited_skill(),
            "skills/greet/examples.md": "Hello, Ada!\n",
            "skills/farewell/SKILL.md": None,
        },
        rationale="Greet by first name\n\nUsers preferred it.",
        author="worker-1",
    ))
    assert result.committed
    assert result.version == 1
    assert result.parent == user_repo.base
    stat = user_repo.repo.git.show("--stat", "--format=%s", result.sha)
    assert "agentdescent: v1 Greet by first name" in stat
    assert "skills/greet/SKILL.md" in stat
    assert "skills/greet/examples.md" in stat
    assert "skills/farewell/SKILL.md" in stat
    names = user_repo.repo.git.show("--name-status", "--format=", result.sha).split("\n")
    assert sorted(names) == [
        "A\tskills/greet/examples.md", "D\tskills/farewell/SKILL.md", "M\tskills/greet/SKILL.md",
    ]
    assert user_repo.repo.git.show(f"{result.sha}:skills/greet/SKILL.md") + "\n" == edited_skill()
    # Everything outside the diff is the parent's tree, untouched.
    assert user_repo.repo.git.diff("--stat", user_repo.base, result.sha, "--", "src", "tests") == ""


def test_git_log_shows_one_commit_per_accepted_diff(user_repo: UserRepo, ledger: Ledger):
    shas = []
    for i in range(3):
        shas.append(ledger.commit(Diff({f"skills/greet/note{i}.md": f"note {i}\n"})).sha)
    ledger.commit(Diff({"skills/greet/note0.md": "note 0\n"}))  # changes nothing: no commit
    log = user_repo.repo.git.log("--format=%H", f"{user_repo.base}..agentdescent/dev").split()
    assert log == list(reversed(shas))
    for i, sha in enumerate(shas):
        stat = user_repo.repo.git.show("--stat", "--format=", sha)
        assert f"skills/greet/note{i}.md" in stat
        assert "1 insertion" in stat


def test_commit_that_changes_nothing_returns_the_head(ledger: Ledger):
    first = ledger.commit(Diff({"skills/greet/SKILL.md": edited_skill()}))
    again = ledger.commit(Diff({"skills/greet/SKILL.md": edited_skill()}, author="other"))
    assert not again.committed
    assert (again.sha, again.version) == (first.sha, 1)
    deleting_nothing = ledger.commit(Diff({"skills/greet/missing.md": None}))
    assert not deleting_nothing.committed
    assert ledger.head() == first.sha


def test_executable_bit_is_kept_and_new_files_are_regular(user_repo: UserRepo, ledger: Ledger):
    result = ledger.commit(Diff({
        "skills/greet/run.sh": "#!/bin/sh\necho hi\n",
        "skills/greet/new.sh": "#!/bin/sh\n",
    }))
    tree = user_repo.repo.commit(result.sha).tree
    assert tree["skills/greet/run.sh"].mode == 0o100755
    assert tree["skills/greet/new.sh"].mode == 0o100644


def test_text_is_stored_byte_for_byte(user_repo: UserRepo, ledger: Ledger):
    text = "crlf line\r\nunicode: héllo ✓\nno final newline"
    result = ledger.commit(Diff({"skills/greet/SKILL.md": text}))
    blob = user_repo.repo.commit(result.sha).tree["skills/greet/SKILL.md"]
    assert blob.data_stream.read() == text.encode("utf-8")
    assert ledger.read_state(result.version)["skills/greet/SKILL.md"] == text


def test_ops_are_validated_before_anything_is_written(user_repo: UserRepo, ledger: Ledger):
    head = ledger.head()
    with pytest.raises(RefusalError) as outside:
        ledger.commit(Diff({"src/app.py": "evil\n"}))
    assert outside.value.path == "src/app.py"
    with pytest.raises(RefusalError):
        ledger.commit(Diff({"skills/conftest.py": "import os\n"}))
    with pytest.raises(RefusalError):
        ledger.commit(Diff({"../outside.md": "x\n"}))
    assert ledger.head() == head


def test_file_directory_clashes_are_refused_not_silently_replaced(ledger: Ledger):
    head = ledger.head()
    with pytest.raises(RefusalError) as is_dir:
        ledger.commit(Diff({"skills/greet": "a file where a directory is\n"}))
    assert is_dir.value.code == "path-conflict"
    with pytest.raises(RefusalError) as under_file:
        ledger.commit(Diff({"skills/greet/SKILL.md/inner.md": "x\n"}))
    assert under_file.value.code == "path-conflict"
    assert ledger.head() == head
    # Deleting the file in the same change makes room for the directory.
    ok = ledger.commit(Diff({"AGENTS.md": None}))
    assert ok.committed


def test_expected_head_mismatch_is_a_cas_conflict_at_once(ledger: Ledger):
    base = ledger.head()
    moved = ledger.commit(Diff({"skills/greet/a.md": "a\n"}))
    with pytest.raises(CasConflictError) as err:
        ledger.commit(Diff({"skills/greet/b.md": "b\n"}), expected_head=base)
    assert err.value.category == "cas-conflict"
    assert ledger.head() == moved.sha
    ok = ledger.commit(Diff({"skills/greet/b.md": "b\n"}), expected_head=moved.sha)
    assert ok.version == 2


def test_commit_before_ensure_branches_says_what_to_do(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree()) as led, pytest.raises(
        LedgerError, match="ensure_branches"
    ):
        led.commit(Diff({"skills/greet/a.md": "a\n"}))


# ---------------------------------------------------------------- evidence & history


def test_evidence_is_written_as_git_trailers(user_repo: UserRepo, ledger: Ledger):
    diff = Diff(
        {"skills/greet/SKILL.md": edited_skill()},
        rationale="Use first names\n\nThe failing test wanted 'Hello, Ada'.",
        author="worker-3",
        base_version=0,
    )
    evidence = Evidence(
        reward_before=0.25, reward_after=0.75, p_improvement=0.987,
        extra={"Agentdescent-Rounds": "4"},
    )
    result = ledger.commit(diff, evidence=evidence)
    message = user_repo.repo.git.log("-1", "--format=%B", result.sha)
    # git itself reads the trailers we wrote.
    assert _git_trailers(user_repo.path, message) == [
        ("Agentdescent-Version", "1"),
        ("Agentdescent-Base", user_repo.base),
        ("Agentdescent-Diff", diff.diff_id),
        ("Agentdescent-Author", "worker-3"),
        ("Agentdescent-Base-Version", "0"),
        *(("Agentdescent-Root", root) for root in ledger.tree.roots),
        ("Agentdescent-Reward-Before", "0.25"),
        ("Agentdescent-Reward-After", "0.75"),
        ("Agentdescent-P-Improvement", "0.987"),
        ("Agentdescent-Rounds", "4"),
    ]
    assert message.startswith("agentdescent: v1 Use first names\n\n")
    record = ledger.history()[-1]
    assert record.version == 1
    assert record.sha == result.sha
    assert record.subject == "agentdescent: v1 Use first names"
    assert record.rationale == "Use first names\n\nThe failing test wanted 'Hello, Ada'."
    assert (record.reward_before, record.reward_after, record.p_improvement) == (0.25, 0.75, 0.987)
    assert record.diff_id == diff.diff_id
    assert record.author == "worker-3"
    assert record.trailer("agentdescent-rounds") == "4"


def _git_trailers(repo_path: Path, message: str) -> list[tuple[str, str]]:
    msg_file = repo_path.parent / "message.txt"
    msg_file.write_text(message, encoding="utf-8")
    out = user_git(repo_path, "interpret-trailers", "--parse", str(msg_file))
    return [tuple(line.split(": ", 1)) for line in out.splitlines()]  # type: ignore[misc]


@pytest.mark.parametrize(
    "extra", [{"bad key": "x"}, {"Agentdescent-Version": "9"}, {"": "x"}]
)
def test_bad_extra_evidence_keys_are_refused(ledger: Ledger, extra: dict[str, str]):
    with pytest.raises(LedgerError, match="key"):
        ledger.commit(Diff({"skills/greet/a.md": "a\n"}), evidence=Evidence(extra=extra))


def test_trailer_values_stay_on_one_line(ledger: Ledger):
    diff = Diff({"skills/greet/a.md": "a\n"}, author="multi\nline: author")
    ledger.commit(diff, evidence=Evidence(extra={"Agentdescent-Note": "two\nlines"}))
    record = ledger.history()[-1]
    assert record.author == "multi line: author"
    assert record.trailer("Agentdescent-Note") == "two lines"


def test_rationale_that_looks_like_trailers_stays_in_the_body(ledger: Ledger):
    rationale = "Fix greeting\n\nSigned-off-by: someone\nAgentdescent-Version: 99"
    ledger.commit(Diff({"skills/greet/a.md": "a\n"}, rationale=rationale))
    record = ledger.history()[-1]
    assert record.version == 1
    assert record.rationale == rationale
    assert record.trailer("Signed-off-by") is None


def test_versions_count_from_the_base_and_history_lists_them(user_repo: UserRepo, ledger: Ledger):
    results = [ledger.commit(Diff({f"skills/greet/n{i}.md": f"{i}\n"})) for i in range(4)]
    assert [r.version for r in results] == [1, 2, 3, 4]
    history = ledger.history()
    assert [r.version for r in history] == [0, 1, 2, 3, 4]
    assert history[0].sha == user_repo.base
    assert history[0].subject == "initial commit"
    assert [r.sha for r in history[1:]] == [r.sha for r in results]
    assert ledger.version_of(results[2].sha) == 3
    assert ledger.version_of(user_repo.base) == 0
    assert [r.version for r in ledger.history("stable")] == [0]


def test_read_state_by_version_sha_and_ref(ledger: Ledger):
    v1 = ledger.commit(Diff({"skills/greet/SKILL.md": edited_skill()}))
    ledger.commit(Diff({"skills/farewell/SKILL.md": None}))
    state0 = ledger.read_state(0)
    assert state0["skills/greet/SKILL.md"] == SKILL_TEXT
    assert "skills/farewell/SKILL.md" in state0
    assert "AGENTS.md" in state0
    assert "src/app.py" not in state0
    assert "tests/test_agent.py" not in state0
    assert ledger.read_state(1)["skills/greet/SKILL.md"] == edited_skill()
    assert ledger.read_state(v1.sha) == ledger.read_state(1)
    assert "skills/farewell/SKILL.md" not in ledger.read_state("agentdescent/dev")
    with pytest.raises(LedgerError, match="no version 7"):
        ledger.read_state(7)
    with pytest.raises(LedgerError, match="does not name a commit"):
        ledger.read_state("no-such-branch")


# ---------------------------------------------------------------- promotion


def test_promote_moves_stable_to_a_dev_commit(user_repo: UserRepo, ledger: Ledger):
    v1 = ledger.commit(Diff({"skills/greet/a.md": "a\n"}))
    v2 = ledger.commit(Diff({"skills/greet/b.md": "b\n"}))
    promoted = ledger.promote()
    assert (promoted.sha, promoted.version, promoted.previous, promoted.moved) == (
        v2.sha, 2, user_repo.base, True,
    )
    assert ledger.head("stable") == v2.sha
    assert not ledger.promote().moved
    rollback = ledger.promote(1)
    assert rollback.sha == v1.sha
    assert ledger.head("stable") == v1.sha
    assert [r.version for r in ledger.history("stable")] == [0, 1]


def test_promote_refuses_commits_not_on_dev(user_repo: UserRepo, ledger: Ledger):
    ledger.commit(Diff({"skills/greet/a.md": "a\n"}))
    user_repo.git("stash", "push", "--include-untracked", "--quiet")
    user_repo.git("switch", "--quiet", "feature")
    write(user_repo.path / "feature.txt", "feature\n")
    user_repo.git("add", "feature.txt")
    user_repo.git("commit", "--quiet", "-m", "feature work")
    feature = user_repo.git("rev-parse", "HEAD")
    stable = ledger.head("stable")
    with pytest.raises(LedgerError, match="not a commit of agentdescent/dev"):
        ledger.promote(feature)
    with pytest.raises(LedgerError, match="not a commit of agentdescent/dev"):
        ledger.promote("feature")
    assert ledger.head("stable") == stable


# ---------------------------------------------------------------- the user's repo is untouched


def test_users_checkout_index_head_and_branches_are_untouched(user_repo: UserRepo):
    before = user_repo.snapshot()
    head_before = user_repo.head_state()
    refs_before = user_repo.other_refs()
    status_before = user_repo.git("status", "--porcelain=v1", "--ignored", "-uall")
    assert " M README.md" in status_before
    assert "M  src/app.py" in status_before
    assert "?? notes.txt" in status_before
    assert "!! debug.log" in status_before
    # `git status` may refresh the index's stat cache: take the snapshot after it.
    before = user_repo.snapshot()

    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        for i in range(3):
            led.commit(
                Diff({"skills/greet/SKILL.md": edited_skill(f"line {i}"), "AGENTS.md": f"{i}\n"}),
                evidence=Evidence(0.1, 0.2, 0.9),
            )
        led.promote()
        led.promote(1)
        with pytest.raises(RefusalError):
            led.commit(Diff({"src/app.py": "no\n"}))
        with pytest.raises(CasConflictError):
            led.commit(Diff({"skills/x.md": "x\n"}), expected_head=user_repo.base)
        led.read_state(2)
        led.history()

    assert user_repo.snapshot() == before
    assert user_repo.head_state() == head_before
    assert user_repo.other_refs() == refs_before
    assert user_repo.git("status", "--porcelain=v1", "--ignored", "-uall") == status_before


def test_isolated_from_user_config_signing_and_hooks(
    user_repo: UserRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A hostile global config (found through HOME and GIT_CONFIG_GLOBAL) and a
    # repository config that asks for signing and points at failing hooks.
    home = tmp_path / "home"
    home.mkdir()
    failing = tmp_path / "hooks"
    failing.mkdir()
    for hook in ("pre-commit", "commit-msg", "post-commit", "reference-transaction"):
        write(failing / hook, "#!/bin/sh\necho hook ran >> %s\nexit 1\n" % (tmp_path / "ran"),
              executable=True)
    global_config = "[user]\n\tname = Global Person\n\temail = g@example.com\n" \
        "[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = /bin/false\n" \
        f"[core]\n\thooksPath = {failing}\n[i18n]\n\tcommitEncoding = ISO-8859-1\n"
    (home / ".gitconfig").write_text(global_config, encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
    user_repo.git("config", "commit.gpgSign", "true")
    user_repo.git("config", "gpg.program", "/bin/false")
    user_repo.git("config", "core.hooksPath", str(failing))
    user_repo.git("config", "i18n.commitEncoding", "ISO-8859-1")
    for hook in ("reference-transaction", "post-commit"):
        write(user_repo.path / ".git" / "hooks" / hook,
              "#!/bin/sh\necho hook ran >> %s\nexit 1\n" % (tmp_path / "ran"), executable=True)
    environ_before = dict(os.environ)

    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        result = led.commit(Diff({"skills/greet/a.md": "é\n"}))
        led.promote()

    assert dict(os.environ) == environ_before
    assert not (tmp_path / "ran").exists()
    raw = user_repo.repo.git.cat_file("commit", result.sha)
    assert "gpgsig" not in raw
    assert "encoding" not in raw
    author = user_repo.repo.git.log("-1", "--format=%an <%ae>|%cn <%ce>", result.sha)
    name, email = DEFAULT_IDENTITY
    assert author == f"{name} <{email}>|{name} <{email}>"


def test_identity_can_be_configured(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree(), identity=("Evo Bot", "evo@example.org")) as led:
        led.ensure_branches()
        sha = led.commit(Diff({"skills/greet/a.md": "a\n"})).sha
    assert user_repo.repo.git.log("-1", "--format=%an <%ae>", sha) == "Evo Bot <evo@example.org>"
    with pytest.raises(LedgerError, match="identity"):
        Ledger(user_repo.path, make_tree(), identity=("Bad <name>", "x@example.org"))


def test_inherited_hook_environment_cannot_redirect_the_ledger(
    user_repo: UserRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Inside a pre-commit hook git exports GIT_DIR and GIT_INDEX_FILE; point them
    # at another repository and at the user's index.
    other = make_user_repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(user_repo.path / ".git" / "index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(other.path / ".git" / "objects"))
    before = user_repo.snapshot()
    other_before = other.snapshot()
    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        sha = led.commit(Diff({"skills/greet/a.md": "a\n"})).sha
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_INDEX_FILE")
    monkeypatch.delenv("GIT_OBJECT_DIRECTORY")
    assert user_repo.git("rev-parse", "agentdescent/dev") == sha
    assert user_repo.snapshot() == before
    assert other.snapshot() == other_before


# ---------------------------------------------------------------- edge cases


def test_not_a_git_repository_says_how_to_fix(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(LedgerError, match=r"not a git repository.*git init"):
        Ledger(plain, make_tree())
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger(tmp_path / "missing", make_tree())


def test_subdirectory_of_a_repository_names_the_top(clean_user_repo: UserRepo):
    with pytest.raises(LedgerError, match="not its top directory") as err:
        Ledger(clean_user_repo.path / "skills", make_tree())
    assert str(clean_user_repo.path) in str(err.value)


def test_repository_without_commits(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    user_git(empty, "init", "--quiet")
    with Ledger(empty, make_tree()) as led, pytest.raises(LedgerError, match="no commits yet"):
        led.ensure_branches()
    assert not (empty / ".git" / "refs" / "heads" / "agentdescent").exists()


def test_unknown_base_is_a_clear_error(ledger: Ledger):
    with pytest.raises(LedgerError, match="does not name a commit"):
        ledger.ensure_branches("no-such-branch")


def test_detached_head_works_and_stays_detached(clean_user_repo: UserRepo):
    clean_user_repo.git("checkout", "--quiet", "--detach", "HEAD")
    head_before = clean_user_repo.head_state()
    assert not head_before[0].startswith("ref:")
    before = clean_user_repo.snapshot()
    with Ledger(clean_user_repo.path, make_tree()) as led:
        result = led.ensure_branches()
        assert result.base == clean_user_repo.base
        led.commit(Diff({"skills/greet/a.md": "a\n"}))
        led.promote()
    assert clean_user_repo.head_state() == head_before
    assert clean_user_repo.snapshot() == before


def test_refuses_to_move_the_checked_out_branch(clean_user_repo: UserRepo):
    with Ledger(clean_user_repo.path, make_tree()) as led:
        led.ensure_branches()
        clean_user_repo.git("switch", "--quiet", "agentdescent/dev")
        before = clean_user_repo.snapshot()
        with pytest.raises(LedgerError, match=r"HEAD of .* is on agentdescent/dev"):
            led.commit(Diff({"skills/greet/a.md": "a\n"}))
        with pytest.raises(LedgerError, match="HEAD"):
            led.ensure_branches("main")
        assert clean_user_repo.snapshot() == before


def test_held_index_lock_does_not_matter(user_repo: UserRepo):
    lock = user_repo.path / ".git" / "index.lock"
    lock.write_bytes(b"someone else's half-written index")
    before = user_repo.snapshot()
    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        result = led.commit(Diff({"skills/greet/a.md": "a\n"}))
        led.promote()
    assert result.committed
    assert lock.read_bytes() == b"someone else's half-written index"
    assert user_repo.snapshot() == before


def test_held_ref_lock_is_retried_then_named(user_repo: UserRepo):
    with Ledger(user_repo.path, make_tree(), max_cas_retries=2) as led:
        led.ensure_branches()
        lock = user_repo.path / ".git" / "refs" / "heads" / "agentdescent" / "dev.lock"
        lock.write_text("held\n", encoding="utf-8")
        before = user_repo.snapshot()
        with pytest.raises(LedgerError) as err:
            led.commit(Diff({"skills/greet/a.md": "a\n"}))
        message = str(err.value)
        assert str(lock) in message
        assert "remove it" in message
        assert "no other agentdescent or git process" in message
        assert lock.read_text(encoding="utf-8") == "held\n"
        assert led.head() == user_repo.base
        assert user_repo.snapshot() == before
        # Once the stale lock is gone, the same commit goes through.
        lock.unlink()
        assert led.commit(Diff({"skills/greet/a.md": "a\n"})).version == 1


def test_lock_released_during_retries_lets_the_commit_through(user_repo: UserRepo):
    """Another process held the ref lock briefly: the retry after it goes through."""
    lock = user_repo.path / ".git" / "refs" / "heads" / "agentdescent" / "dev.lock"
    failures: list[str] = []

    class ReleasingRepo(GitRepo):
        def update_refs(self, updates, reason):
            try:
                super().update_refs(updates, reason)
            except RefUpdateFailed as exc:
                failures.append(exc.kind)
                lock.unlink()  # the other process finishes and releases its lock
                raise

    with Ledger(user_repo.path, make_tree()) as led:
        led.ensure_branches()
        led.git.close()
        led.git = ReleasingRepo(user_repo.path, None)
        lock.write_text("held\n", encoding="utf-8")
        result = led.commit(Diff({"skills/greet/a.md": "a\n"}))
    assert failures == ["lock"]
    assert result.committed
    assert result.attempts == 2
    assert not lock.exists()


def test_shallow_clone_works_without_a_carry(clean_user_repo: UserRepo, tmp_path: Path):
    clean_user_repo.commit_on_main({"README.md": "# Demo 2\n"}, "second")
    clone = tmp_path / "shallow"
    user_git(tmp_path, "clone", "--quiet", "--depth", "1",
             f"file://{clean_user_repo.path}", str(clone))
    assert user_git(clone, "rev-parse", "--is-shallow-repository") == "true"
    with Ledger(clone, make_tree()) as led:
        led.ensure_branches()
        result = led.commit(Diff({"skills/greet/a.md": "a\n"}))
        assert [r.version for r in led.history()] == [0, 1]
        assert led.promote().sha == result.sha


def test_bare_repository_is_supported(clean_user_repo: UserRepo, tmp_path: Path):
    bare = tmp_path / "bare.git"
    user_git(tmp_path, "clone", "--quiet", "--bare", str(clean_user_repo.path), str(bare))
    with Ledger(bare, make_tree()) as led:
        led.ensure_branches("main")
        assert led.commit(Diff({"skills/greet/a.md": "a\n"})).version == 1


def test_closed_ledger_refuses_work(user_repo: UserRepo):
    led = Ledger(user_repo.path, make_tree())
    led.ensure_branches()
    led.close()
    with pytest.raises(LedgerError, match="closed"):
        led.head()


# ---------------------------------------------------------------- scratch mode


def test_scratch_ledger_is_a_throwaway_repository():
    files = {"skills/greet/SKILL.md": SKILL_TEXT, "tests/test_x.py": "def test(): pass\n"}
    with Ledger.scratch(files, FileTree(["skills"])) as led:
        directory = Path(led.directory)
        assert directory.is_dir()
        assert led.branches.created == ("agentdescent/dev", "agentdescent/stable")
        assert led.read_state(0) == {"skills/greet/SKILL.md": SKILL_TEXT}
        result = led.commit(Diff({"skills/greet/SKILL.md": edited_skill()}))
        assert result.version == 1
        assert led.read_state(1)["skills/greet/SKILL.md"] == edited_skill()
        repo = git.Repo(directory)
        assert repo.bare
        assert repo.git.show(f"{led.base_commit}:tests/test_x.py") == "def test(): pass"
        assert not (directory / "hooks").exists()
        repo.close()
    assert not directory.exists()


def test_scratch_close_is_idempotent_and_cleans_up_on_error():
    led = Ledger.scratch({"skills/a.md": "a\n"}, FileTree(["skills"]))
    directory = Path(led.directory)
    led.close()
    led.close()
    assert not directory.exists()
    with pytest.raises(RefusalError):
        Ledger.scratch({"../escape.md": "x\n"}, FileTree(["skills"]))


def test_parse_message_of_foreign_commits():
    parsed = parse_message("fix: thing\n\nbody\n\nSigned-off-by: A <a@b>\n")
    assert parsed.version is None
    assert parsed.get("signed-off-by") == "A <a@b>"
    assert parse_message("").subject == ""
    not_ours = parse_message("Merge pull request #1\n\nAgentdescent-Version: 3\n")
    assert not_ours.version is None  # no agentdescent subject and no base: a base commit


def test_racing_writer_is_retried_on_the_new_head(user_repo: UserRepo):
    """A real competing commit lands between our commit object and our ref swap."""
    with Ledger(user_repo.path, make_tree()) as led, Ledger(
        user_repo.path, make_tree()
    ) as rival:
        led.ensure_branches()
        interlopers: list[str] = []

        class RacingRepo(GitRepo):
            races_left = 2

            def commit_tree(self, tree: str, parents: Sequence[str], message: str) -> str:
                sha = super().commit_tree(tree, parents, message)
                if self.races_left:
                    self.races_left -= 1
                    n = len(interlopers)
                    interlopers.append(
                        rival.commit(Diff({f"skills/greet/rival{n}.md": f"{n}\n"})).sha
                    )
                return sha

        led.git.close()
        led.git = RacingRepo(user_repo.path, None)
        result = led.commit(Diff({"skills/greet/mine.md": "mine\n"}))
        assert result.attempts == 3
        assert result.version == 3
        assert result.parent == interlopers[-1]
        state = led.read_state("agentdescent/dev")
        assert {"skills/greet/rival0.md", "skills/greet/rival1.md",
                "skills/greet/mine.md"} <= set(state)

        RacingRepo.races_left = 5
        led.git.close()
        led.git = RacingRepo(user_repo.path, None)
        led.max_cas_retries = 2
        with pytest.raises(CasConflictError, match="3 attempts"):
            led.commit(Diff({"skills/greet/late.md": "late\n"}))
        assert [r.version for r in led.history()] == list(range(7))
        assert "skills/greet/late.md" not in led.read_state("agentdescent/dev")


# ---------------------------------------------------------------- objects written in-process


def test_trees_match_what_git_itself_builds(clean_user_repo: UserRepo, tmp_path: Path):
    """Porcelain in a separate clone is the oracle for the trees the ledger writes."""
    ops: dict[str, str | None] = {
        # Names that sort around the existing directory skills/greet ("greet/" order).
        "skills/greet-x.md": "dash\n",
        "skills/greet.md": "dot\n",
        "skills/greet0.md": "zero\n",
        "skills/greet-y/inner.md": "nested\n",
        "skills/deep/a/b/c/d.md": "deep\n",
        "skills/é ü/spaced name.md": "unicode\n",
        "skills/greet/run.sh": "#!/bin/sh\necho changed\n",
        "skills/farewell/SKILL.md": None,  # empties the directory: it disappears
    }
    with Ledger(clean_user_repo.path, FileTree(["skills"])) as led:
        led.ensure_branches()
        sha = led.commit(Diff(ops)).sha
        removal = led.commit(Diff({"skills/deep/a/b/c/d.md": None})).sha
    clone = tmp_path / "oracle"
    user_git(tmp_path, "clone", "--quiet", str(clean_user_repo.path), str(clone))
    for path, text in ops.items():
        if text is None:
            (clone / path).unlink()
        else:
            write(clone / path, text)
    user_git(clone, "add", "-A")
    assert user_git(clone, "write-tree") == clean_user_repo.git("rev-parse", f"{sha}^{{tree}}")
    (clone / "skills/deep/a/b/c/d.md").unlink()
    user_git(clone, "add", "-A")
    assert user_git(clone, "write-tree") == clean_user_repo.git("rev-parse", f"{removal}^{{tree}}")
    assert "skills/deep" not in clean_user_repo.git("ls-tree", "-r", "--name-only", removal)
    # The repository is sound by git's strictest check.
    clean_user_repo.git("fsck", "--strict", "--no-dangling", "--no-progress")


def test_commit_objects_are_plain_git_commits(user_repo: UserRepo, ledger: Ledger):
    result = ledger.commit(Diff({"skills/greet/a.md": "a\n"}, rationale="Add a\n\nwith ünïcode"))
    raw = user_repo.git("cat-file", "-p", result.sha).split("\n")
    assert raw[0].startswith("tree ")
    assert raw[1] == f"parent {user_repo.base}"
    assert raw[2].startswith("author agentdescent <agentdescent@users.noreply.github.com> ")
    assert raw[3].startswith("committer agentdescent <agentdescent@users.noreply.github.com> ")
    assert raw[4] == ""
    body = user_repo.git("log", "-1", "--format=%B", result.sha)
    assert body.startswith(
        "agentdescent: v1 Add a\n\nAdd a\n\nwith ünïcode\n\nAgentdescent-Version: 1"
    )
    user_repo.git("fsck", "--strict", "--no-dangling", "--no-progress")


def test_refuses_to_move_a_branch_checked_out_in_another_worktree(
    clean_user_repo: UserRepo, tmp_path: Path
):
    with Ledger(clean_user_repo.path, make_tree()) as led:
        led.ensure_branches()
        clean_user_repo.git("worktree", "add", "--quiet", str(tmp_path / "wt"), "agentdescent/dev")
        with pytest.raises(LedgerError, match="checked out"):
            led.commit(Diff({"skills/greet/a.md": "a\n"}))
        clean_user_repo.git("worktree", "remove", str(tmp_path / "wt"))
        assert led.commit(Diff({"skills/greet/a.md": "a\n"})).version == 1


def test_linked_worktree_path_works_with_shared_refs(clean_user_repo: UserRepo, tmp_path: Path):
    clean_user_repo.git("worktree", "add", "--quiet", "-b", "side", str(tmp_path / "wt"))
    with Ledger(tmp_path / "wt", make_tree()) as led:
        result = led.ensure_branches()
        assert result.base == clean_user_repo.base
        sha = led.commit(Diff({"skills/greet/a.md": "a\n"})).sha
    assert clean_user_repo.git("rev-parse", "agentdescent/dev") == sha


def test_packed_refs_are_read_and_updated(user_repo: UserRepo, ledger: Ledger):
    v1 = ledger.commit(Diff({"skills/greet/a.md": "a\n"}))
    user_repo.git("pack-refs", "--all", "--prune")
    assert not (user_repo.path / ".git/refs/heads/agentdescent/dev").exists()
    assert ledger.head() == v1.sha
    v2 = ledger.commit(Diff({"skills/greet/b.md": "b\n"}), expected_head=v1.sha)
    assert v2.version == 2
    assert user_repo.git("rev-parse", "agentdescent/dev") == v2.sha
    assert ledger.promote().sha == v2.sha
