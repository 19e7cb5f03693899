"""Stat scans of a workspace and the careful file operations that undo a run.

A workspace is checked after every candidate run and reset before the next, so
both must cost little on a 10,000-file repository.  The trick is the one git's
index uses: remember each entry's ``lstat`` signature (mode, size, mtime, ctime,
inode) when its content is known, and read a file again only when the signature
moved.  ``ctime`` cannot be set from user space, so a candidate that rewrites a
file and puts its mtime back with ``utime`` still changes the signature.

The operations that write into a workspace never follow a symbolic link a run
may have planted: files are unlinked and re-created with ``O_NOFOLLOW``, and every
parent directory is checked to be a real directory (a symlink or file in its
place is removed) before anything is written below it.

This module knows nothing about git or frozen paths; :mod:`.workspace`,
:mod:`.reset` and :mod:`.frozencheck` do.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass

CACHE_DIR_NAMES: frozenset[str] = frozenset(
    {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".benchmarks"}
)
"""Directories tools create next to the code they run; removed at reset, never a violation.

None of them is a place Python imports from or pytest collects in (``.*`` is in
pytest's default ``norecursedirs``), so what a candidate plants there cannot
change how the frozen tests behave.
"""

CACHE_SUFFIXES: tuple[str, ...] = (".pyc", ".pyo")

Sig = tuple[int, int, int, int, int]
"""``(st_mode, st_size, st_mtime_ns, st_ctime_ns, st_ino)``; for directories only mode and inode."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Content:
    """What a path holds, independent of when it was written.

    ``kind`` is ``file``, ``link``, ``dir`` or ``special`` (fifo, socket,
    device); ``mode`` the permission bits (0 for links); ``digest`` a BLAKE2b
    digest of a file's bytes or a link's target, empty otherwise.
    """

    kind: str
    mode: int
    digest: bytes = b""


class Known:
    """A path whose content is known, and the signature it had when it was."""

    __slots__ = ("content", "sig")

    def __init__(self, content: Content, sig: Sig) -> None:
        self.content = content
        self.sig = sig


def digest_bytes(data: bytes) -> bytes:
    """Content digest used throughout (BLAKE2b-160: collision-resistant, fast)."""
    return hashlib.blake2b(data, digest_size=20).digest()


def is_cache(path: str) -> bool:
    """True when a repo-relative ``path`` is a tool cache or lies inside one."""
    if path.endswith(CACHE_SUFFIXES):
        return True
    return any(part in CACHE_DIR_NAMES for part in path.split("/"))


def signature(st: os.stat_result) -> Sig:
    if stat.S_ISDIR(st.st_mode):
        # A directory's times move whenever an entry inside it does; its entries
        # are tracked one by one, so only its mode and identity matter here.
        return (st.st_mode, 0, 0, 0, st.st_ino)
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def scan(root: str, descend_cache: frozenset[str] | set[str] = frozenset()) -> dict[str, Sig]:
    """Signature of every entry below ``root``, keyed by posix relative path.

    Symbolic links are reported, never followed.  Cache directories are reported
    but not entered (their contents are thrown away wholesale) unless their path
    is in ``descend_cache`` — a cache directory that is part of the commit.
    """
    found: dict[str, Sig] = {}
    _scan_into(root, "", found, descend_cache)
    return found


def _scan_into(
    folder: str, prefix: str, found: dict[str, Sig], descend_cache: frozenset[str] | set[str]
) -> None:
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    with it:
        for entry in it:
            rel = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            found[rel] = signature(st)
            if stat.S_ISDIR(st.st_mode) and (
                entry.name not in CACHE_DIR_NAMES or rel in descend_cache
            ):
                _scan_into(entry.path, rel + "/", found, descend_cache)


def content_of(full: str, sig: Sig) -> Content:
    """Read what ``full`` (whose lstat signature is ``sig``) holds now."""
    mode = sig[0]
    if stat.S_ISREG(mode):
        fd = os.open(full, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        try:
            digest = hashlib.blake2b(digest_size=20)
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
        finally:
            os.close(fd)
        return Content("file", stat.S_IMODE(mode), digest.digest())
    if stat.S_ISLNK(mode):
        return Content("link", 0, digest_bytes(os.fsencode(os.readlink(full))))
    if stat.S_ISDIR(mode):
        return Content("dir", stat.S_IMODE(mode))
    return Content("special", stat.S_IMODE(mode))


def kind_of(sig: Sig) -> str:
    mode = sig[0]
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "special"


# --------------------------------------------------------------------- writing


def _make_writable_and_retry(func: object, path: str, _exc: object) -> None:
    """rmtree error hook: a run may have removed write permission; restore it once."""
    parent = os.path.dirname(path)
    try:
        os.chmod(parent, 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, onerror=_ignore)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _ignore(*_args: object) -> None:
    return None


def remove_tree(path: str) -> None:
    """Remove a directory tree even where a run took away write permission."""
    shutil.rmtree(path, onerror=_make_writable_and_retry)


def remove_path(full: str) -> bool:
    """Remove whatever is at ``full`` (directory trees included); False if nothing was."""
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat.S_ISDIR(st.st_mode):
        remove_tree(full)
    else:
        try:
            os.unlink(full)
        except PermissionError:
            os.chmod(os.path.dirname(full), 0o700)
            os.unlink(full)
    return True


def real_parents(base: str, rel: str) -> bool:
    """True when every ancestor of ``rel`` below ``base`` is a real directory.

    Checked before removing ``base/rel``: when a run replaced an ancestor with a
    symbolic link, the path resolves outside the workspace and must not be
    touched (the link itself is removed as its own entry).
    """
    current = base
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except (FileNotFoundError, NotADirectoryError):
            return False
    return True


def make_dir(full: str, mode: int) -> bool:
    """A real directory with ``mode`` at ``full``, replacing any file or link there.

    Returns True when it replaced such a file or link.
    """
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        st = None
    replaced = st is not None and not stat.S_ISDIR(st.st_mode)
    if replaced:
        os.unlink(full)
        st = None
    if st is None:
        os.mkdir(full, mode)
    if st is None or stat.S_IMODE(st.st_mode) != mode:
        os.chmod(full, mode)
    return replaced


def ensure_dirs(root: str, rel_dir: str, mode: int) -> list[str]:
    """Make every component of ``rel_dir`` below ``root`` a real directory.

    Returns the relative paths of the directories it had to create (or replace),
    shallowest first.  Symbolic links in the way are removed, never followed.
    """
    if not rel_dir:
        return []
    created: list[str] = []
    current = root
    parts = rel_dir.split("/")
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            continue
        if st is not None:
            os.unlink(current)
        os.mkdir(current, mode)
        os.chmod(current, mode)
        created.append("/".join(parts[: i + 1]))
    return created


def write_file(full: str, data: bytes, mode: int) -> None:
    """Replace whatever is at ``full`` by a new regular file holding ``data``.

    The old entry is unlinked first, so a hard link or symlink a run planted at
    this path is cut off rather than written through.
    """
    remove_path(full)
    try:
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as exc:  # pragma: no cover - raced by another writer
        if exc.errno != errno.EEXIST:
            raise
        remove_path(full)
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
