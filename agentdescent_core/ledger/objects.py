"""Writing git objects in-process: new trees from path ops, and commits.

Only the trees on the paths that change are rewritten; every other subtree is
reused by its id, so the cost is proportional to the change, not to the size of
the repository.  Objects are read through GitPython's object database and
written as loose objects through gitdb's in-process store (the library under
GitPython), which renames each finished object into place.

Why not a temporary index, ``git write-tree`` and ``git commit-tree``?  That
works (the tests use porcelain as an independent oracle for the trees), but it
costs four git processes between reading the dev head and swapping the ref.
(GitPython's own ``odb.store`` also starts a ``git hash-object`` per object.)
That interval is the window in which a concurrent writer makes us lose the
compare-and-swap; shrinking it from ~15 ms to well under a millisecond is what
keeps concurrent writers from starving each other within the retry budget.
Commits written here are never signed and carry exactly the identity given.

Tree entries follow git's format exactly: ``<octal mode> <name>\\0<20-byte id>``,
modes without leading zeros (``40000`` for trees), sorted by name bytes with a
directory's name compared as if it ended in ``/``.  An existing file keeps its
mode (the executable bit survives an edit); new files are ``100644``.  A write
that would put a file where a directory is, or a directory where a file is
(unless that file is deleted in the same change), or touch a submodule, is
refused with ``path-conflict`` instead of silently replacing the other entry.
A directory left empty disappears, as in git.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import git
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb import IStream, LooseObjectDB

from agentdescent_core.errors import RefusalError

MODE_TREE = 0o40000
MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_GITLINK = 0o160000

_DELETE = object()


@dataclass
class _Node:
    """The changes below one directory: leaf ops by name, and subdirectories."""

    leaves: dict[str, object] = field(default_factory=dict)  # name -> blob hex sha | _DELETE
    children: dict[str, _Node] = field(default_factory=dict)


def apply_ops_to_tree(
    repo: git.Repo,
    parent_tree: str | None,
    ops: Mapping[str, str | None],
    blobs: Mapping[str, str],
) -> str:
    """Hex id of ``parent_tree`` (None: empty) with ``ops`` applied; objects are stored.

    ``ops`` maps normalised posix paths to text (the blob id is in ``blobs``) or
    None to delete the file.
    """
    root = _Node()
    for path, value in ops.items():
        parts = path.split("/")
        node = root
        for part in parts[:-1]:
            node = node.children.setdefault(part, _Node())
        node.leaves[parts[-1]] = _DELETE if value is None else blobs[path]
    binsha = _rewrite(repo, _hex_to_bin(parent_tree) if parent_tree else None, root, "")
    if binsha is None:
        binsha = _store(repo, b"")
    return binsha.hex()


def _rewrite(repo: git.Repo, tree: bytes | None, node: _Node, prefix: str) -> bytes | None:
    entries = _read_tree(repo, tree) if tree is not None else {}
    for name, op in node.leaves.items():
        path = prefix + name
        existing = entries.get(name)
        if op is _DELETE:
            if existing is not None and existing[0] not in (MODE_TREE, MODE_GITLINK):
                del entries[name]
            continue
        if name in node.children:
            raise _conflict(path, "is written as a file and as a directory in the same change")
        mode = MODE_FILE
        if existing is not None:
            if existing[0] == MODE_TREE:
                raise _conflict(path, "is a directory in the repository")
            if existing[0] == MODE_GITLINK:
                raise _conflict(path, "is a git submodule")
            if existing[0] == MODE_EXEC:
                mode = MODE_EXEC
        assert isinstance(op, str)
        entries[name] = (mode, _hex_to_bin(op))
    for name, child in node.children.items():
        path = prefix + name
        existing = entries.get(name)
        subtree: bytes | None = None
        if existing is not None:
            if existing[0] == MODE_GITLINK:
                raise _conflict(path, "is a git submodule")
            if existing[0] == MODE_TREE:
                subtree = existing[1]
            elif node.leaves.get(name) is not _DELETE:
                raise _conflict(path, "must be a directory, but it is a file")
        new = _rewrite(repo, subtree, child, path + "/")
        if new is None:
            entries.pop(name, None)
        else:
            entries[name] = (MODE_TREE, new)
    if not entries:
        return None
    if tree is not None and entries == _read_tree(repo, tree):
        return tree
    return _store(repo, _serialise(entries))


def write_commit(
    repo: git.Repo,
    tree: str,
    parents: Sequence[str],
    message: str,
    identity: tuple[str, str],
    when: float | None = None,
) -> str:
    """Store a commit object (UTF-8 message, no signature); return its hex id.

    Author and committer are both ``identity`` at ``when`` (default: now) in
    the local time zone.  ``identity`` must already be validated (no ``<``,
    ``>`` or newline), as :func:`.gitenv.validate_identity` does.
    """
    stamp = time.time() if when is None else when
    seconds = int(stamp)
    offset = time.localtime(seconds).tm_gmtoff // 60
    sign = "+" if offset >= 0 else "-"
    zone = f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    name, email = identity
    person = f"{name} <{email}> {seconds} {zone}"
    lines = [f"tree {tree}", *(f"parent {p}" for p in parents),
             f"author {person}", f"committer {person}"]
    body = message if message.endswith("\n") else message + "\n"
    data = ("\n".join(lines) + "\n\n" + body).encode("utf-8")
    return _store(repo, data, b"commit").hex()


def _read_tree(repo: git.Repo, binsha: bytes) -> dict[str, tuple[int, bytes]]:
    data: bytes = repo.odb.stream(binsha).read()
    return {name: (mode, sha) for sha, mode, name in tree_entries_from_data(data)}


def _serialise(entries: Mapping[str, tuple[int, bytes]]) -> bytes:
    def order(name: str) -> bytes:  # git sorts a directory as if its name ended in "/"
        raw = name.encode("utf-8", "surrogateescape")
        return raw + b"/" if entries[name][0] == MODE_TREE else raw

    out = io.BytesIO()
    tree_to_stream(
        [(entries[name][1], entries[name][0], name) for name in sorted(entries, key=order)],
        out.write,
    )
    return out.getvalue()


def _store(repo: git.Repo, data: bytes, kind: bytes = b"tree") -> bytes:
    """Write one loose object through gitdb's object store; return its binary id.

    gitdb writes to a temporary file and renames it into place, so a concurrent
    reader sees a whole object or none, and an object already present is kept.
    """
    objects = LooseObjectDB(os.path.join(repo.common_dir, "objects"))
    stored = objects.store(IStream(kind, len(data), io.BytesIO(data)))
    return bytes(stored.binsha)


def _hex_to_bin(hexsha: str) -> bytes:
    return bytes.fromhex(hexsha)


def _conflict(path: str, detail: str) -> RefusalError:
    return RefusalError(
        "invalid-proposal",
        "path-conflict",
        f"{path}: {detail}; choose another path or delete the clashing entry in the same change",
        path=path,
    )
