"""Writing results where GitHub Actions reads them: step outputs and the job summary.

Outputs go to the file named by ``$GITHUB_OUTPUT`` as ``name=value`` lines;
a value holding a newline uses the ``name<<DELIMITER`` heredoc form with a
random delimiter that cannot occur in the value, since a fixed one could be
forged by the value's own text and set other outputs.  Outside Actions (the
variable unset) both functions do nothing and return False, so a local
``agentdescent pr`` can call them unconditionally.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping

from agentdescent_core.github.errors import GitHubError

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def set_outputs(values: Mapping[str, object]) -> bool:
    """Append ``values`` as step outputs to ``$GITHUB_OUTPUT``; False when not in Actions.

    None becomes an empty string, booleans ``true`` / ``false``, mappings and
    lists JSON; everything else ``str()``.
    """
    path = os.environ.get("GITHUB_OUTPUT", "")
    if not path:
        return False
    chunks: list[str] = []
    for name, value in values.items():
        if not _NAME_RE.match(name):
            raise GitHubError(
                f"{name!r} is not a valid step output name; use letters, digits, '-' and '_'"
            )
        text = _text(value)
        if "\n" in text or "\r" in text:
            delimiter = f"ghadelimiter_{uuid.uuid4().hex}"
            while delimiter in text:
                delimiter = f"ghadelimiter_{uuid.uuid4().hex}"
            chunks.append(f"{name}<<{delimiter}\n{text}\n{delimiter}\n")
        else:
            chunks.append(f"{name}={text}\n")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(chunks))
    return True


def append_step_summary(markdown: str) -> bool:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` (the job's summary page); False outside."""
    path = os.environ.get("GITHUB_STEP_SUMMARY", "")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return True
