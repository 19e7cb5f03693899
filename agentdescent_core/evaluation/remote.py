"""What travels between the controller and a cluster worker, and how replies are signed.

Three things go out, each built once by the controller:

* a :class:`FrozenBundle`: the frozen tree's identity (``frozen_hash``, the
  hash every workspace computes of the committed tree and the copied ignored
  files) and the files themselves, as a git pack of the commit's tree plus the
  ignored files.  A worker unpacks it once, caches it under the hash
  (:mod:`.cluster_worker`) and checks that the workspace it builds from it
  hashes the same;
* a :class:`JobSetup`: the artifact roots and frozen rules, the sandbox
  backend's *name*, and the child configuration (limits, timeouts, pytest
  arguments, and the allowlisted environment variables only: what
  ``evolve_env`` already lets through to a child, never the controller's
  other variables);
* per chunk, the candidate's files and plan (:class:`~.executor.ChunkRequest`),
  a job id and the job's key.

One thing comes back: a :class:`ChunkReply`, the same records, frozen check
and tamper lines a local evaluation produces, serialised to JSON and signed
with HMAC-SHA256 (the journal's and the eval cache's :func:`~.records.mac`).
The key of a job is derived from a per-run key that only the controller holds
(:func:`job_key`), so a worker learns the keys of the jobs it ran and no other:
a reply altered on the way, replayed from another job or run, or made up by
anything that did not receive the job is rejected (:func:`open_reply`).  A
worker itself is trusted infrastructure (it holds its jobs' keys); the
candidate inside its sandbox is not, and never sees a key.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentdescent_core.artifacts.filetree import FileTree
from agentdescent_core.evaluation.child import ChildOutcome
from agentdescent_core.evaluation.records import TestRecord, mac, mac_matches
from agentdescent_core.governance import FrozenSet
from agentdescent_core.ledger.gitenv import objects_only_env
from agentdescent_core.sandbox.env import allowed_variables
from agentdescent_core.sandbox.frozencheck import FrozenCheck, Violation
from agentdescent_core.sandbox.spec import Limits

#: The reply format; a worker of another format is an environment mismatch.
WIRE_VERSION = 1
#: Variables the worker takes from its own machine, not from the controller.
WORKER_LOCAL_VARIABLES: tuple[str, ...] = ("PATH",)


class ReplyRejected(Exception):
    """A reply whose MAC, job id or content does not check out; the chunk runs again."""


# ---------------------------------------------------------------- the frozen tree

@dataclass(frozen=True)
class FrozenBundle:
    """The committed tree of one commit and the copied ignored files, keyed by ``frozen_hash``.

    ``pack`` is a git pack of the tree's objects (``git pack-objects``), so a
    worker rebuilds the very same blobs and modes; ``object_format`` is
    ``sha1`` or ``sha256``; ``ignored`` the git-ignored importable files the
    controller's workspace copied from the working tree (path -> bytes).
    """

    frozen_hash: str
    tree: str
    object_format: str
    pack: bytes
    ignored: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.pack) + sum(len(data) for data in self.ignored.values())

    @classmethod
    def build(cls, repo: str | os.PathLike[str], commit: str, *, frozen_hash: str,
              ignored: Mapping[str, bytes]) -> FrozenBundle:
        """Pack the tree of ``commit`` in ``repo`` (read-only: objects only, no config or hooks)."""
        from agentdescent_core.sandbox.userrepo import _open_repo

        _git_dir, common_dir, _work_tree = _open_repo(os.fspath(repo))
        object_format = "sha256" if len(commit) == 64 else "sha1"
        with tempfile.TemporaryDirectory(prefix="agentdescent-pack-") as shadow:
            env = {**os.environ, **objects_only_env(
                common_dir=common_dir, shadow_dir=os.path.join(shadow, "git"),
                work_tree=os.path.join(shadow, "tree"),
                private_index=os.path.join(shadow, "index"), object_format=object_format)}
            tree = _git(["rev-parse", "--verify", f"{commit}^{{tree}}"], env).decode().strip()
            objects = _git(["rev-list", "--objects", tree], env)
            pack = _git(["pack-objects", "--stdout", "-q"], env, stdin=objects)
        return cls(frozen_hash, tree, object_format, pack, dict(ignored))


def _git(args: Sequence[str], env: Mapping[str, str], *, stdin: bytes | None = None,
         cwd: str | None = None) -> bytes:
    done = subprocess.run(["git", *args], input=stdin, env=dict(env), cwd=cwd,
                          capture_output=True, check=False, timeout=600)
    if done.returncode != 0:
        raise OSError(f"git {args[0]} failed ({done.returncode}): "
                      f"{done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout


# ---------------------------------------------------------------- the shared setup

@dataclass(frozen=True)
class JobSetup:
    """What every chunk of one verifier shares; built once, sent with each chunk.

    ``env`` holds only the controller's variables that ``env_allow`` lets
    through to a child (:func:`allowed_env`), minus :data:`WORKER_LOCAL_VARIABLES`.
    """

    frozen_hash: str
    roots: tuple[str, ...]
    frozen_patterns: tuple[str, ...]
    frozen_roots: tuple[str, ...]
    frozen_files: tuple[str, ...]
    subdir: str
    #: Controller paths a child must not see where they exist (an embedded cluster
    #: shares the controller's file system: the user's repository).
    hidden: tuple[str, ...]
    backend: str
    image: str | None
    env: Mapping[str, str]
    env_allow: tuple[str, ...]
    network: str
    limits: Limits
    test_timeout: float | None
    run_timeout: float
    output_chars: int
    pytest_args: tuple[str, ...]
    max_restarts: int
    trace_reads: bool

    def tree(self) -> FileTree:
        """The artifact strategy a worker's workspaces use (same roots, same frozen rules)."""
        return FileTree(self.roots, frozen=self.frozen())

    def frozen(self) -> FrozenSet:
        return FrozenSet(self.frozen_patterns, artifact_roots=self.frozen_roots,
                         frozen_files=self.frozen_files)


def allowed_env(host_env: Mapping[str, str], allow: Sequence[str]) -> dict[str, str]:
    """The variables of ``host_env`` that a child may see under ``allow`` (what may travel)."""
    return {name: value for name, value in allowed_variables(host_env, allow).items()
            if name not in WORKER_LOCAL_VARIABLES}


# ---------------------------------------------------------------- keys and replies

def job_key(run_key: bytes, job_id: str) -> bytes:
    """The key one job's reply is signed with: HMAC of the job id under the run's key."""
    return bytes.fromhex(mac(run_key, b"agentdescent-job\0" + job_id.encode()))


@dataclass(frozen=True)
class ChunkReply:
    """A chunk's result as a local run would give it (records, frozen check, tamper lines).

    ``worker`` names the worker that ran it (for messages), ``seconds`` how
    long the chunk took there.
    """

    job_id: str
    frozen_hash: str
    worker: str
    outcome: ChildOutcome
    check: FrozenCheck
    seconds: float = 0.0

    def to_json(self) -> str:
        outcome, check = self.outcome, self.check
        return json.dumps({
            "wire": WIRE_VERSION,
            "job_id": self.job_id,
            "frozen_hash": self.frozen_hash,
            "worker": self.worker,
            "seconds": self.seconds,
            "records": [asdict(record) for record in outcome.records],
            "error": outcome.error,
            "runs": outcome.runs,
            "not_run": sorted([nodeid, repeat] for nodeid, repeat in outcome.not_run),
            "tamper": list(outcome.tamper),
            "violations": [[v.path, v.kind] for v in check.violations],
            "drift": list(check.drift),
            "check_seconds": check.seconds,
            "written": list(check.written),
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ChunkReply:
        data: dict[str, Any] = json.loads(text)
        if data.get("wire") != WIRE_VERSION:
            raise ValueError(f"reply format {data.get('wire')!r}, expected {WIRE_VERSION}")
        outcome = ChildOutcome(
            records=tuple(TestRecord.from_mapping(r) for r in data["records"]),
            error=None if data["error"] is None else str(data["error"]),
            runs=int(data["runs"]),
            not_run=frozenset((str(n), int(r)) for n, r in data["not_run"]),
            tamper=tuple(str(t) for t in data["tamper"]),
        )
        check = FrozenCheck([Violation(str(p), str(k)) for p, k in data["violations"]],
                            [str(d) for d in data["drift"]], float(data["check_seconds"]),
                            [str(w) for w in data["written"]])
        return cls(str(data["job_id"]), str(data["frozen_hash"]), str(data["worker"]),
                   outcome, check, float(data["seconds"]))


def seal_reply(reply: ChunkReply, key: bytes) -> tuple[str, str]:
    """``reply`` as (JSON text, its MAC under the job's ``key``): what a worker sends back."""
    text = reply.to_json()
    return text, mac(key, text.encode())


def open_reply(sealed: object, *, key: bytes, job_id: str, frozen_hash: str,
               plan: Mapping[str, tuple[int, int]]) -> ChunkReply:
    """The reply a worker sent for ``job_id``, or ReplyRejected saying what is wrong with it.

    Checked: the MAC under the job's key, the job id and frozen tree it
    names, and that every record is one the plan asked for.
    """
    if (not isinstance(sealed, (tuple, list)) or len(sealed) != 2
            or not all(isinstance(part, str) for part in sealed)):
        raise ReplyRejected(f"job {job_id}: the reply is not a signed reply "
                            f"({type(sealed).__name__})")
    text, given = sealed
    if not mac_matches(key, text.encode(), given):
        raise ReplyRejected(f"job {job_id}: the reply's MAC does not verify (altered, forged "
                            "or signed for another job)")
    try:
        reply = ChunkReply.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplyRejected(f"job {job_id}: the signed reply does not parse: {exc}") from None
    if reply.job_id != job_id or reply.frozen_hash != frozen_hash:
        raise ReplyRejected(f"job {job_id}: the reply is for job {reply.job_id} on frozen tree "
                            f"{reply.frozen_hash[:12]}")
    wanted = {(nodeid, first) for nodeid, (first, _count) in plan.items()}
    stray = [f"{r.nodeid}[{r.repeat}]" for r in reply.outcome.records
             if (r.nodeid, r.repeat) not in wanted]
    if stray:
        raise ReplyRejected(f"job {job_id}: the reply holds records the plan did not ask for: "
                            + ", ".join(stray[:3]))
    return reply


def worker_tmp(name: str) -> Path:
    """A directory of this machine's temporary directory private to this user (made on demand).

    One that exists but belongs to someone else, or that others may write, is
    refused: a frozen tree cached there could have been planted.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = Path(tempfile.gettempdir()) / f"{name}-{uid}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if hasattr(os, "getuid") and (info.st_uid != uid or info.st_mode & 0o022
                                  or path.is_symlink()):
        raise OSError(f"{path} is not a private directory of this user (owner {info.st_uid}, "
                      f"mode {oct(info.st_mode & 0o777)}); remove it and run again")
    return path
