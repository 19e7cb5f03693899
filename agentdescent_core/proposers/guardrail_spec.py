"""The ``evolve_guardrails`` value: which checks a run asks for, read without the scanners.

Kept apart from :mod:`agentdescent_core.proposers.guardrails` (which compiles
the secret, PII and command patterns) because the plugin validates the ini
value in every pytest run's ``pytest_configure``, where only ``--evolve`` runs
ever need the scanners.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

SCRIPT_POLICIES: tuple[str, ...] = ("warn", "reject")
ScriptPolicy = Literal["warn", "reject"]


@dataclass(frozen=True)
class GuardrailSpec:
    """What ``evolve_guardrails`` asked for: PII checks on, and the script policy if given.

    ``scripts`` is None when the value did not say (``evolve_script_policy``
    then decides); secrets are always checked and have no switch.
    """

    pii: bool = False
    scripts: ScriptPolicy | None = None


def parse_guardrails(value: str) -> GuardrailSpec:
    """Read ``secrets pii scripts=reject`` (words separated by spaces or commas).

    ``secrets`` may be named (it is always on); ``pii`` turns PII checks on;
    ``scripts`` / ``scripts=warn`` / ``scripts=reject`` sets the script policy.
    Raises ValueError naming the word for anything else, and for an attempt to
    turn secrets off (``no-secrets``, ``secrets=off``).
    """
    pii = False
    scripts: ScriptPolicy | None = None
    for word in re.split(r"[\s,]+", value.strip()):
        name, sep, arg = word.partition("=")
        name = name.strip().lower()
        if not name:
            continue
        if name == "secrets" and (not sep or arg.lower() in ("on", "true", "yes")):
            continue
        if name in ("no-secrets", "secrets"):
            raise ValueError(
                f"{word!r}: secret checks cannot be turned off (a credential in a committed "
                f"file is never wanted); leave 'secrets' out or name it alone"
            )
        if name == "pii" and not sep:
            pii = True
        elif name == "scripts" and (not sep or arg in SCRIPT_POLICIES):
            scripts = "warn" if not sep else arg  # type: ignore[assignment]
        else:
            raise ValueError(
                f"{word!r} is not a guardrail; use 'secrets', 'pii' and "
                f"'scripts=warn' or 'scripts=reject'"
            )
    return GuardrailSpec(pii=pii, scripts=scripts)
