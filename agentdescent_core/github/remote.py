"""The git side of publishing: which GitHub repository a remote is, and pushing to it.

Only three kinds of git command touch the remote — ``ls-remote``, ``fetch`` of
one commit and ``push`` of ledger refs — and none of them reads or writes the
user's working tree, index or ``HEAD``.  Two details keep every other ref
untouched as well:

- we push and fetch to the remote's *URL* (``git remote get-url --push``), not
  its name: git only updates remote-tracking refs (``refs/remotes/origin/*``)
  when it talks to a named remote, and those are the user's refs;
- fetches use ``--no-write-fetch-head`` and an empty ``--refmap``, so a fetched
  commit lands in the object database and nowhere else.

Every push is a ``--force-with-lease`` per ref, the expected value read with
``ls-remote`` just before: the ledger may legitimately move a branch backwards
(a rollback) or onto a carry commit, so a plain fast-forward check would be
wrong, but a push must never overwrite something another process pushed in the
meantime.  A lost lease is a :class:`GitHubError` that says so and what to do.

Git runs with hooks switched off (a user's ``pre-push`` hook must not run, or
block, on our refs), ``GIT_TERMINAL_PROMPT=0`` (nothing waits for a password)
and automatic gc off; the user's own configuration is otherwise read, because
their credential helpers and ``insteadOf`` rules are what make the push work.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import git

from agentdescent_core.github.errors import GitHubError

_OVERRIDES = (
    ("core.hooksPath", os.devnull),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
    ("push.gpgSign", "false"),
    ("advice.pushUpdateRejected", "false"),
)
_SCP_RE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[^:/\s]+):(?P<path>(?!/)[^\s]+)$")
_URL_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?:[^@/\s]*@)?(?P<host>[^/\s]+)"
                     r"(?P<path>/[^\s]*)?$", re.IGNORECASE)
_USERINFO_RE = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^@/\s]+@", re.IGNORECASE)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_ZERO = "0" * 40


def display_url(url: str) -> str:
    """``url`` fit for a message: any ``user:password@`` part is replaced by ``***@``."""
    return _USERINFO_RE.sub(lambda m: m.group("scheme") + "***@", url)


def parse_repository(url: str) -> str:
    """``owner/name`` of a GitHub remote URL (https, ssh://, git:// or scp-like ``git@host:o/n``).

    A trailing ``.git`` or ``/`` is dropped.  A local path or ``file://`` URL
    has no owner/name, so that is a :class:`GitHubError` telling to set
    ``GITHUB_REPOSITORY``.
    """
    raw = url.strip()
    path: str | None = None
    match = _URL_RE.match(raw)
    if match and match.group("scheme").lower() != "file":
        path = match.group("path") or ""
    elif not match and not raw.startswith(("/", ".", "~")) and not re.match(r"^[A-Za-z]:[\\/]",
                                                                          raw):
        scp = _SCP_RE.match(raw)
        if scp:
            path = scp.group("path")
    if path is not None:
        parts = [p for p in path.strip("/").split("/") if p]
        if len(parts) >= 2:
            owner, name = parts[-2], parts[-1]
            name = name[:-4] if name.endswith(".git") else name
            if _NAME_RE.match(owner) and _NAME_RE.match(name) and name:
                return f"{owner}/{name}"
    raise GitHubError(
        f"cannot tell the GitHub repository from the remote URL {display_url(raw)!r} "
        "(expected https://HOST/OWNER/NAME, ssh://git@HOST/OWNER/NAME or git@HOST:OWNER/NAME); "
        "set GITHUB_REPOSITORY=OWNER/NAME (or pass --repository)"
    )


@dataclass(frozen=True)
class _Pushed:
    flag: str
    ref: str
    summary: str


class GitRemote:
    """Git commands on the repository at ``repo_root`` that talk to one remote.

    ``remote`` is the name of a configured remote (``origin``).  Use as a
    context manager, or call :meth:`close`.
    """

    def __init__(self, repo_root: str | os.PathLike[str], remote: str = "origin") -> None:
        root = os.path.abspath(os.fspath(repo_root))
        try:
            self.repo = git.Repo(root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise GitHubError(
                f"{root} is not a git repository; run this from the repository whose "
                "agentdescent branches should be published"
            ) from None
        self.root = root
        self.remote = remote
        self.env = _environment(os.fspath(self.repo.git_dir))
        self._url: str | None = None

    def close(self) -> None:
        self.repo.close()

    def __enter__(self) -> GitRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ running git

    def run(self, *args: str) -> tuple[int, str, str]:
        """``git <args>``: (exit status, stdout, stderr), never raising on a non-zero status."""
        status, out, err = self.repo.git.execute(
            ["git", *args], env=self.env, with_extended_output=True, with_exceptions=False,
            strip_newline_in_stdout=False,
        )
        return int(status or 0), str(out), display_url(str(err))

    def ok(self, *args: str, what: str) -> str:
        status, out, err = self.run(*args)
        if status != 0:
            raise GitHubError(f"could not {what}: {_last_lines(err)}")
        return out

    # ------------------------------------------------------------ local

    @property
    def url(self) -> str:
        """The push URL of the remote (with ``pushurl`` and ``insteadOf`` applied)."""
        if self._url is None:
            status, out, _ = self.run("remote", "get-url", "--push", self.remote)
            if status != 0 or not out.strip():
                names = self.run("remote")[1].split()
                known = ", ".join(names) if names else "none"
                raise GitHubError(
                    f"the repository {self.root} has no remote named {self.remote!r} "
                    f"(remotes: {known}); add it (git remote add {self.remote} URL) or pass "
                    "the name of the remote to push to"
                )
            self._url = out.strip()
        return self._url

    def local_sha(self, ref: str) -> str | None:
        status, out, _ = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        return out.strip() if status == 0 and out.strip() else None

    def has_commit(self, sha: str) -> bool:
        return self.run("cat-file", "-e", f"{sha}^{{commit}}")[0] == 0

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.run("merge-base", "--is-ancestor", ancestor, descendant)[0] == 0

    # ------------------------------------------------------------ remote

    def ls_remote(self, refs: Iterable[str]) -> dict[str, str]:
        """{full ref name: sha} on the remote for exactly the given full ref names."""
        wanted = list(dict.fromkeys(refs))
        out = self.ok("ls-remote", "--", self.url, *wanted,
                      what=f"read {', '.join(wanted)} from {display_url(self.url)} "
                           "(check the remote URL and your network/credentials)")
        found: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name in wanted:
                found[name] = sha.strip()
        return found

    def fetch_commit(self, ref: str, sha: str) -> None:
        """Make commit ``sha`` (the remote's ``ref``) available locally, moving no ref."""
        if self.has_commit(sha):
            return
        for source in (sha, ref):
            status, _, err = self.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                                      "--refmap=", "--no-recurse-submodules", self.url, source)
            if status == 0 and self.has_commit(sha):
                return
        raise GitHubError(
            f"could not fetch {ref} ({sha[:12]}) from {display_url(self.url)}: "
            f"{_last_lines(err)}; check the branch exists on the remote and you can read it"
        )

    def push(self, refs: Sequence[str], *, seen: Mapping[str, str] | None = None) -> list[str]:
        """Push local ``refs`` (full names) with a lease each; the refs that moved.

        The lease of each ref is its remote value in ``seen`` (an earlier
        :meth:`ls_remote` answer, a ref missing from it being absent), else what
        ``ls-remote`` says now.
        """
        local: dict[str, str] = {}
        for ref in refs:
            sha = self.local_sha(ref)
            if sha is None:
                raise GitHubError(
                    f"{ref} does not exist in {self.root}, so there is nothing to push; run "
                    "the evolution first (pytest --evolve PATH) or check the branch prefix"
                )
            local[ref] = sha
        remote = self.ls_remote(local) if seen is None else seen
        pending = [ref for ref in local if remote.get(ref) != local[ref]]
        if not pending:
            return []
        args = ["push", "--porcelain", "--no-verify"]
        args += [f"--force-with-lease={ref}:{remote.get(ref, '')}" for ref in pending]
        args += ["--", self.url, *(f"{local[ref]}:{ref}" for ref in pending)]
        status, out, err = self.run(*args)
        results = _parse_porcelain(out)
        for item in results:
            if item.flag == "!":
                raise _rejection(item, self.remote, remote.get(item.ref))
        if status != 0:
            raise GitHubError(
                f"git push to {display_url(self.url)} failed: {_last_lines(err)}; check that "
                "your credentials may push to this repository (in GitHub Actions: "
                "actions/checkout with its default persist-credentials and "
                "`permissions: contents: write`)"
            )
        return [item.ref for item in results if item.flag in (" ", "+", "*")]


def push_branches(repo_root: str | os.PathLike[str], *, remote: str = "origin",
                  refs: Sequence[str]) -> list[str]:
    """Push ``refs`` (``agentdescent/stable``, ``refs/heads/...`` or ``refs/agentdescent/...``).

    Each ref is force-pushed with a lease on the value ``ls-remote`` reported
    just before, so a concurrent push by someone else is refused instead of
    overwritten.  Returns the full names of the refs that actually moved (a ref
    already at the local value is left alone).
    """
    with GitRemote(repo_root, remote) as handle:
        return handle.push([full_ref(r) for r in refs])


def full_ref(ref: str) -> str:
    """``refs/heads/<ref>`` for a short branch name, the name itself when it starts with refs/."""
    return ref if ref.startswith("refs/") else f"refs/heads/{ref}"


# ---------------------------------------------------------------------- helpers


def _environment(git_dir: str) -> dict[str, str]:
    inherited = os.environ
    start = 0
    count = inherited.get("GIT_CONFIG_COUNT", "")
    if count.isdigit():
        start = int(count)
    env = {
        "GIT_DIR": os.path.abspath(git_dir),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_PAGER": "cat",
        "GIT_CONFIG_COUNT": str(start + len(_OVERRIDES)),
    }
    for offset, (key, value) in enumerate(_OVERRIDES):
        env[f"GIT_CONFIG_KEY_{start + offset}"] = key
        env[f"GIT_CONFIG_VALUE_{start + offset}"] = value
    return env


def _parse_porcelain(out: str) -> list[_Pushed]:
    results: list[_Pushed] = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and len(parts[0]) == 1:
            _, _, dst = parts[1].partition(":")
            results.append(_Pushed(parts[0], dst, parts[2]))
    return results


_LEASE_WORDS = ("stale info", "failed to update ref", "cannot lock ref", "incorrect old value",
                "failed to lock")


def _rejection(item: _Pushed, remote: str, expected: str | None) -> GitHubError:
    short = item.ref.removeprefix("refs/heads/")
    if any(word in item.summary for word in _LEASE_WORDS):
        seen = expected[:12] if expected else "absent"
        return GitHubError(
            f"someone else pushed {short} on {remote} while we were publishing (it was "
            f"{seen} a moment before); nothing was overwritten. Fetch it (git fetch {remote} "
            f"'+{item.ref}:{item.ref}'), check what it holds, and publish again — or delete "
            f"the remote branch (git push {remote} --delete {short}) to replace it"
        )
    return GitHubError(
        f"{remote} refused the push of {short}: {item.summary}. If the branch is protected, "
        f"allow this token to push to {short} or use another branch prefix"
    )


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-count:]) or "(git printed no error)"


def check_remote_known(handle: GitRemote, ref: str, remote_sha: str | None,
                       local: Mapping[str, str]) -> None:
    """Refuse to replace a remote ``ref`` whose commit none of the ``local`` heads contains.

    A ledger branch only ever moves to commits built on what it held before
    (new versions, carries, rollbacks to earlier versions), so a remote value
    missing from the local history means another machine published work this
    repository has not seen.
    """
    if remote_sha is None or remote_sha == _ZERO:
        return
    if handle.has_commit(remote_sha) and any(
        handle.is_ancestor(remote_sha, sha) for sha in local.values()
    ):
        return
    short = ref.removeprefix("refs/heads/")
    raise GitHubError(
        f"{short} on {handle.remote} is at {remote_sha[:12]}, a commit this repository's "
        f"{', '.join(k.removeprefix('refs/heads/') for k in local)} do not contain: someone "
        f"else pushed it. Fetch it (git fetch {handle.remote} '+{ref}:{ref}') so the next run "
        f"continues from it, or delete the remote branch (git push {handle.remote} --delete "
        f"{short}) to replace it"
    )
