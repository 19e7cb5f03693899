"""The git side of publishing: owner/name from remote URLs, and pushes with a lease."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import UserRepo, user_git, write
from github_server import add_bare_remote, evolve

from agentdescent_core.github import GitHubError, parse_repository, push_branches
from agentdescent_core.github.remote import display_url


@pytest.mark.parametrize(("url", "expected"), [
    ("https://github.com/octo/demo.git", "octo/demo"),
    ("https://github.com/octo/demo", "octo/demo"),
    ("https://github.com/octo/demo/", "octo/demo"),
    ("https://x-access-token:abc@github.com/octo/demo.git", "octo/demo"),
    ("http://ghe.example:8080/team-a/agent.skills.git", "team-a/agent.skills"),
    ("ssh://git@github.com/octo/demo.git", "octo/demo"),
    ("ssh://git@ghe.example:2222/octo/demo", "octo/demo"),
    ("git@github.com:octo/demo.git", "octo/demo"),
    ("github.com:octo/demo", "octo/demo"),
    ("git://github.com/octo/demo.git", "octo/demo"),
])
def test_parse_repository(url: str, expected: str):
    assert parse_repository(url) == expected


@pytest.mark.parametrize("url", [
    "/srv/git/demo.git", "./demo", "file:///srv/git/octo/demo.git", "C:\\repos\\demo",
    "https://github.com/onlyowner", "~/demo.git",
])
def test_paths_and_odd_urls_say_to_set_github_repository(url: str):
    with pytest.raises(GitHubError, match="GITHUB_REPOSITORY"):
        parse_repository(url)


def test_credentials_in_a_url_are_never_echoed():
    url = "https://user:hunter2secret@example.com/nope"
    assert "hunter2secret" not in display_url(url)
    with pytest.raises(GitHubError) as caught:
        parse_repository(url)
    assert "hunter2secret" not in str(caught.value)


@pytest.fixture
def remote(user_repo: UserRepo, tmp_path: Path) -> Path:
    return add_bare_remote(user_repo.path, tmp_path)


def remote_refs(bare: Path) -> dict[str, str]:
    out = user_git(bare, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def test_push_moves_only_the_named_refs_and_nothing_local(user_repo: UserRepo, remote: Path):
    shas = evolve(user_repo.path, ["one", "two"])
    # A pre-push hook that fails and leaves a trace: ours must not run it.
    write(user_repo.path / ".git/hooks/pre-push",
          "#!/bin/sh\ntouch \"$GIT_DIR/../hook-ran\"\nexit 1\n", executable=True)
    before = user_repo.snapshot()
    others = user_repo.other_refs()
    moved = push_branches(user_repo.path, refs=["agentdescent/stable", "agentdescent/dev"])
    assert moved == ["refs/heads/agentdescent/stable", "refs/heads/agentdescent/dev"]
    refs = remote_refs(remote)
    assert refs["refs/heads/agentdescent/stable"] == shas[-1]
    assert refs["refs/heads/agentdescent/dev"] == shas[-1]
    assert refs["refs/heads/main"] == user_repo.base
    # No remote-tracking refs were written, the hook did not run, nothing else changed.
    assert user_repo.other_refs() == others
    assert not (user_repo.path / "hook-ran").exists()
    assert user_repo.snapshot() == before
    assert push_branches(user_repo.path, refs=["agentdescent/stable"]) == []


def test_push_can_move_a_branch_backwards(user_repo: UserRepo, remote: Path):
    evolve(user_repo.path, ["one"])
    push_branches(user_repo.path, refs=["refs/heads/agentdescent/stable"])
    user_git(user_repo.path, "update-ref", "refs/heads/agentdescent/stable", user_repo.base)
    assert push_branches(user_repo.path, refs=["agentdescent/stable"]) == [
        "refs/heads/agentdescent/stable"]
    assert remote_refs(remote)["refs/heads/agentdescent/stable"] == user_repo.base


def test_a_lost_lease_is_refused_and_explained(user_repo: UserRepo, remote: Path,
                                               tmp_path: Path):
    """The remote branch moves between our ls-remote and our push: nothing is overwritten."""
    evolve(user_repo.path, ["one"])
    push_branches(user_repo.path, refs=["agentdescent/stable"])
    other = tmp_path / "other"
    user_git(tmp_path, "clone", "--quiet", str(remote), str(other))
    write(other / "notes.md", "theirs\n")
    user_git(other, "add", "notes.md")
    user_git(other, "commit", "--quiet", "-m", "theirs")
    user_git(other, "push", "--quiet", "origin", "HEAD:refs/heads/theirs")
    theirs = user_git(other, "rev-parse", "HEAD")
    # Someone else's push lands while ours is in flight (the server-side hook runs
    # after git read the remote's value and before it updates the ref).
    hook = remote / "hooks" / "pre-receive"
    write(hook, "#!/bin/sh\nunset GIT_QUARANTINE_PATH\n"
                f"git update-ref refs/heads/agentdescent/stable {theirs}\ncat >/dev/null\n",
          executable=True)
    evolve(user_repo.path, ["two"])
    with pytest.raises(GitHubError, match="someone else pushed agentdescent/stable") as caught:
        push_branches(user_repo.path, refs=["agentdescent/stable"])
    assert "nothing was overwritten" in str(caught.value)
    assert "git fetch origin" in str(caught.value)
    assert remote_refs(remote)["refs/heads/agentdescent/stable"] == theirs


def test_unknown_remote_and_missing_ref_are_explained(user_repo: UserRepo, remote: Path):
    evolve(user_repo.path, ["one"])
    with pytest.raises(GitHubError, match=r"no remote named 'upstream'.*git remote add"):
        push_branches(user_repo.path, remote="upstream", refs=["agentdescent/stable"])
    with pytest.raises(GitHubError, match="evo/stable does not exist"):
        push_branches(user_repo.path, refs=["evo/stable"])


def test_a_remote_that_cannot_be_reached_is_explained(user_repo: UserRepo, tmp_path: Path):
    evolve(user_repo.path, ["one"])
    user_git(user_repo.path, "remote", "add", "origin", str(tmp_path / "missing.git"))
    with pytest.raises(GitHubError, match=r"missing\.git"):
        push_branches(user_repo.path, refs=["agentdescent/stable"])
