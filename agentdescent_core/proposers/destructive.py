"""Destructive commands in proposed text: what a skill's script or instructions could run.

A skill folder holds scripts the agent runs and prose (``SKILL.md``) that tells
it which commands to run, so every text file of a proposal is read here, not
only files that look like scripts.  Two severities:

* **critical** — irreversible loss of the machine or its data, refused by the
  guardrails whatever ``scripts=`` says and counted as a critical violation:
  ``rm -r`` of ``/``, ``/*``, ``~``, ``$HOME`` or a top-level system directory
  (shell or ``shutil.rmtree``), writing a block device (``dd of=/dev/sda``,
  ``> /dev/nvme0n1``, ``mkfs``, ``wipefs``), fork bombs (``:(){ :|:& };:``,
  ``while True: os.fork()``);
* **risky** — reaches outside the artifact or hands control to the network,
  a warning under ``scripts=warn`` and a refusal under ``scripts=reject``:
  ``rm -r`` of another absolute path, ``chmod``/``chown``/``chgrp`` of a system
  path (recursive or to 777), ``curl … | sh`` and its variants, ``dd`` reading
  ``/dev/zero`` or ``/dev/urandom`` without a ``count=``.

Look-alikes stay quiet: ``rm -rf build/``, ``rm -rf "$TMPDIR/x"``, ``rm -f
/tmp/x.lock`` (not recursive), ``chmod +x run.sh``, ``dd of=/dev/null``,
``shutil.rmtree(tmp)``.  Pure functions: :func:`scan_destructive` returns
``(critical, label)`` pairs and decides nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_SYSTEM_DIRS = (
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "opt", "proc", "root",
    "sbin", "srv", "sys", "usr", "var", "System", "Users", "Library", "Applications",
)
_HOME = r"(?:~|\$HOME|\$\{HOME\})"
# ``/``, ``/*``, ``/.``, ``~``, ``~/``, ``~/*``, ``$HOME/*``, ``/etc``, ``/usr/*`` ...
_WIPED = re.compile(
    rf"^(?:/+\.?|/+\*|{_HOME}/*\*?|/+(?:{'|'.join(_SYSTEM_DIRS)})/*\*?)$"
)
_ABSOLUTE = re.compile(rf"^(?:/|{_HOME})")

_COMMAND_END = r"[^\n;|&`)]*"
_RM = re.compile(rf"(?<![\w./-])rm\s+(?P<args>{_COMMAND_END})")
_RM_LIST = re.compile(
    r"""[\[(]\s*["']rm["']\s*,(?P<args>(?:\s*["'][^"'\n]*["']\s*,?)+)"""
)
_QUOTED = re.compile(r"""["']([^"'\n]*)["']""")
_RMTREE = re.compile(
    r"""\bshutil\.rmtree\(\s*(?:r?["'](?P<literal>[^"'\n]*)["']|(?P<expr>[^,)\n]*))"""
)
_PY_HOME = re.compile(
    r"""expanduser\(\s*["']~/?["']|Path\.home\(|environ\[\s*["']HOME["']\s*\]"""
    r"""|getenv\(\s*["']HOME["']|environ\.get\(\s*["']HOME["']|^\s*os\.sep\s*$"""
    r"""|^\s*Path\(\s*["']/["']\s*$"""
)
_DD_DEVICE = re.compile(r"(?<![\w-])dd\s[^\n;|&]*?\bof=/dev/(?!null\b|stdout\b|stderr\b|fd/)\w")
_DD_ENDLESS = re.compile(r"(?<![\w-])dd\s(?P<args>[^\n;|&]*\bif=/dev/(?:zero|u?random)\b[^\n;|&]*)")
_REDIRECT_DEVICE = re.compile(
    r">\s*/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|md\d|dm-\d)"
)
_MKFS = re.compile(r"(?<![\w./-])(?:mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs)\s+[^\n]*?/dev/")
_FORK_BOMB = re.compile(
    r"(?P<name>[A-Za-z_:][\w:]*)\s*\(\s*\)\s*\{\s*(?P=name)\s*\|\s*(?P=name)\s*&\s*\}\s*;?\s*(?P=name)"
)
# Up to four whole lines between the loop and the fork.  Each repetition must end
# at a newline: an optional one (``\n?``) lets the engine split one long line in
# every possible way, and a 60-character line then costs most of a second.
_PY_FORK_BOMB = re.compile(
    r"while\s+(?:True|1)\s*:(?:[^\n]*\n){0,4}?[^\n]*\bos\.fork\s*\(\s*\)"
)
_PERMS = re.compile(rf"(?<![\w./-])(?P<cmd>chmod|chown|chgrp)\s+(?P<args>{_COMMAND_END})")
_PIPE_TO_SHELL = re.compile(
    r"(?<![\w-])(?:curl|wget|fetch)\b[^\n|;]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?"
    r"(?:env\s+)?(?:ba|z|da|k|fi)?sh\b"
    r"|(?<![\w-])(?:curl|wget)\b[^\n|;]*\|\s*(?:sudo\s+)?python\d?(?:\.\d+)?\b"
    r"|(?:ba|z)?sh\s+(?:-c\s+)?[\"']?(?:<\(|\$\()\s*(?:curl|wget)\b"
)


def _words(args: str) -> list[str]:
    """Shell words of one command's arguments, quotes and trailing punctuation removed."""
    out = []
    for raw in args.split():
        word = raw.strip("\"'").rstrip("\"',)]")
        if word:
            out.append(word)
    return out


def _recursive(flags: list[str]) -> bool:
    return any(
        f in ("--recursive", "-R") or (re.fullmatch(r"-[A-Za-z]+", f) is not None
                                       and ("r" in f or "R" in f))
        for f in flags
    )


def _rm_findings(flags: list[str], targets: list[str]) -> Iterator[tuple[bool, str]]:
    if not _recursive(flags):
        return
    for target in targets:
        shown = target[:40]
        if _WIPED.match(target):
            yield True, f"rm -r of {shown!r} (wipes the system or the home directory)"
        elif _ABSOLUTE.match(target):
            yield False, f"rm -r of the absolute path {shown!r} (outside the artifact)"


def _split(words: list[str]) -> tuple[list[str], list[str]]:
    flags = [w for w in words if w.startswith("-") and w != "--"]
    targets = [w for w in words if not w.startswith("-")]
    return flags, targets


def _rmtree_target(match: re.Match[str]) -> tuple[str, bool] | None:
    """What ``shutil.rmtree`` removes, and whether that wipes the system or home."""
    literal = match.group("literal")
    if literal is not None:
        return literal, bool(_WIPED.match(literal))
    expr = (match.group("expr") or "").strip()
    if _PY_HOME.search(expr):
        return expr + ")", True
    return None


def scan_destructive(text: str) -> Iterator[tuple[bool, str, int]]:
    """``(critical, what, offset)`` for every destructive command in ``text``."""
    for match in _RM.finditer(text):
        for critical, what in _rm_findings(*_split(_words(match.group("args")))):
            yield critical, what, match.start()
    for match in _RM_LIST.finditer(text):
        words = _QUOTED.findall(match.group("args"))
        for critical, what in _rm_findings(*_split(words)):
            yield critical, what, match.start()
    for match in _RMTREE.finditer(text):
        found = _rmtree_target(match)
        if found is None:
            continue
        target, wiped = found
        if wiped:
            yield True, f"shutil.rmtree of {target[:40]!r} (wipes the system or home)", \
                match.start()
        elif _ABSOLUTE.match(target):
            yield False, f"shutil.rmtree of the absolute path {target[:40]!r}", match.start()
    for pattern, what in (
        (_DD_DEVICE, "dd onto a device"),
        (_REDIRECT_DEVICE, "a write redirected onto a disk device"),
        (_MKFS, "formats or wipes a device"),
        (_FORK_BOMB, "a shell fork bomb"),
        (_PY_FORK_BOMB, "a fork bomb (os.fork in an endless loop)"),
    ):
        for match in pattern.finditer(text):
            yield True, what, match.start()
    for match in _DD_ENDLESS.finditer(text):
        if "count=" not in match.group("args") and not _DD_DEVICE.match(match.group()):
            yield False, "dd from /dev/zero or /dev/urandom without count= (fills a disk)", \
                match.start()
    for match in _PERMS.finditer(text):
        flags, targets = _split(_words(match.group("args")))
        modes = [t for t in targets if re.fullmatch(r"0?[0-7]{3,4}|[ugoa]*[+=-][rwxXst]+", t)]
        paths = [t for t in targets if t not in modes]
        wide = _recursive(flags) or any(m.lstrip("0") == "777" for m in modes)
        system = [p for p in paths if _WIPED.match(p)]
        if wide and system:
            yield False, f"{match.group('cmd')} of the system path {system[0][:40]!r}", \
                match.start()
    for match in _PIPE_TO_SHELL.finditer(text):
        yield False, "runs code fetched from the network (curl | sh)", match.start()
