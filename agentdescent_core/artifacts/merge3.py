"""Line-level three-way merge of two edits of the same text.

Used when the ledger carries evolved files onto a moved base branch, and by the
aggregator when two proposals edit the same file: changes to different regions
combine, the same change made on both sides is taken once, and lines changed
differently on both sides are a conflict.

The merge itself is git's (``git merge-file``, the xdiff engine behind ``git
merge``), run through GitPython on temporary files with no system/global git
configuration and no surrounding repository, so the user's
``merge.conflictStyle`` cannot change the answer.  Following git, changes on
*adjacent* lines of both sides count as overlapping: a merge that cannot be
decided line by line is reported, not guessed.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import git

#: ``git merge-file`` exits with the number of conflicts, capped at 127; larger or
#: negative values (as an unsigned byte: >= 128) mean it could not merge at all.
_MAX_CONFLICT_EXIT = 127


class Merge3Error(ValueError):
    """The texts could not be merged at all (as opposed to merging with conflicts)."""


@dataclass(frozen=True)
class Merge3Result:
    """Outcome of :func:`merge3`.

    ``text`` is the merged text; when ``conflicts`` > 0 it contains git-style
    conflict markers (``<<<<<<< ours`` / ``=======`` / ``>>>>>>> theirs``) and must
    not be used as an artifact as is.  ``clean`` is ``conflicts == 0``.
    """

    text: str
    conflicts: int

    @property
    def clean(self) -> bool:
        return self.conflicts == 0


def _standalone_env(workdir: str) -> dict[str, str]:
    """No system/global configuration, and no repository to discover config from."""
    return {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CEILING_DIRECTORIES": os.path.dirname(workdir),
        "GIT_DIR": os.path.join(workdir, "no-repository"),
    }


def merge3(
    base: str,
    ours: str,
    theirs: str,
    *,
    labels: tuple[str, str, str] = ("ours", "base", "theirs"),
) -> Merge3Result:
    """Merge ``ours`` and ``theirs``, two edits of ``base``.

    Trivial cases are answered without running git (one side unchanged, both
    sides equal).  Texts are written and read back as UTF-8 bytes, so line
    endings and a missing final newline survive unchanged.
    """
    if ours == theirs:
        return Merge3Result(ours, 0)
    if ours == base:
        return Merge3Result(theirs, 0)
    if theirs == base:
        return Merge3Result(ours, 0)
    with tempfile.TemporaryDirectory(prefix="agentdescent-merge3-") as workdir:
        paths = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = os.path.join(workdir, name)
            with open(path, "wb") as handle:
                handle.write(text.encode("utf-8"))
            paths.append(path)
        runner = git.Git(workdir)
        status, stdout, stderr = runner.execute(
            [
                "git",
                "merge-file",
                "-p",
                "-L",
                labels[0],
                "-L",
                labels[1],
                "-L",
                labels[2],
                *paths,
            ],
            with_extended_output=True,
            with_exceptions=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
            env=_standalone_env(workdir),
        )
    if not isinstance(status, int) or status < 0 or status > _MAX_CONFLICT_EXIT:
        raise Merge3Error(f"git merge-file could not merge the texts: {stderr!s}".strip())
    assert isinstance(stdout, bytes)
    return Merge3Result(stdout.decode("utf-8"), status)
