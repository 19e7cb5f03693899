"""Guardrails: what a proposed edit may never carry into the repository.

A model proposer sees the artifact, failing tests and their output, and may echo
anything it saw, including a credential printed by a test, into a file that is
then committed to the ledger and possibly pushed.  Every proposal is therefore
scanned before it is evaluated:

* secrets (provider token formats, PEM private keys, and the literal values of
  secret-looking environment variables of this process) are refused and
  counted as critical violations; findings only ever show a masked form;
* PII (emails, phone numbers, Luhn-valid card numbers) when enabled: opting in
  means the user wants it kept out, so it is refused and counted like a secret;
* scripts (``.py``/``.sh``/``.bash``/``.zsh`` or a shebang) that evaluate code,
  spawn processes or use the network are flagged: a warning, or a refusal under
  ``script_policy="reject"``.  A script that both reads credentials (the
  environment, ``~/.ssh``, ...) and talks to the network is an exfiltration
  shape and refused as critical whatever the policy;
* destructive commands in any text file (a skill's prose tells the agent what
  to run, so ``SKILL.md`` counts as much as ``run.sh``; see
  :mod:`.destructive`): wiping ``/`` or the home directory, writing a disk
  device and fork bombs are refused as critical whatever the policy; ``rm -r``
  of other absolute paths, ``chmod``/``chown`` of system paths and ``curl | sh``
  are flagged like risky scripts (a warning, or a refusal under ``reject``);
* files above ``max_bytes`` are refused as ``oversized``.

Secrets cannot be switched off: a credential in a committed, possibly pushed
file is never what a user wants.  ``Guardrails.from_spec`` reads the
``evolve_guardrails`` ini value (``secrets pii scripts=reject``).

Where it runs: the engine's worker checks every proposal once the strategy
made its Diff (:func:`agentdescent_core.loop.worker.work_unit`), so hook
proposals, model proposals and ``evolve()`` proposals all pass the same gate.

Repeated critical violations mean the proposer is misbehaving (or being steered
by a poisoned input); the ``violation_limit``-th one raises
:class:`GuardrailsTripped` from ``check`` (a ContractError: the run ends, with
``Guardrails.tripped`` as the reason).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from agentdescent_core.errors import RefusalError, RunStopped
from agentdescent_core.proposers.destructive import scan_destructive
from agentdescent_core.proposers.guardrail_spec import (
    SCRIPT_POLICIES as SCRIPT_POLICIES,
    GuardrailSpec as GuardrailSpec,
    ScriptPolicy,
    parse_guardrails as parse_guardrails,
)

FindingKind = Literal["secret", "pii", "script", "destructive", "size"]


@dataclass(frozen=True)
class Finding:
    """One thing a guardrail noticed in one file of a proposal (never the secret itself)."""

    kind: FindingKind
    path: str
    detail: str
    critical: bool


# ---------------------------------------------------------------------- secrets

# Each pattern has a ``prefix`` group: the public, format-identifying part that is
# safe to show.  The rest of a match is never echoed.
_SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Anthropic API key", re.compile(r"(?P<prefix>sk-ant-)[A-Za-z0-9_-]{32,}")),
    (
        "OpenAI API key",
        re.compile(r"(?<![A-Za-z0-9_-])(?P<prefix>sk-(?:proj|svcacct|admin)-)[A-Za-z0-9_-]{32,}"),
    ),
    ("OpenAI API key", re.compile(r"(?<![A-Za-z0-9_-])(?P<prefix>sk-)[A-Za-z0-9]{32,}")),
    ("GitHub token", re.compile(r"(?<![A-Za-z0-9_])(?P<prefix>gh[pousr]_)[A-Za-z0-9]{36,}")),
    ("GitHub token", re.compile(r"(?<![A-Za-z0-9_])(?P<prefix>github_pat_)[A-Za-z0-9_]{22,}")),
    (
        "AWS access key id",
        re.compile(r"(?<![A-Z0-9])(?P<prefix>(?:AKIA|ASIA))[0-9A-Z]{16}(?![A-Z0-9])"),
    ),
    (
        "AWS secret access key",
        re.compile(
            r"(?i:(?P<prefix>aws_?secret_?access_?key)[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{40}"
        ),
    ),
    ("Slack token", re.compile(r"(?<![A-Za-z0-9])(?P<prefix>xox[abposr]-)[A-Za-z0-9-]{10,}")),
    ("Google API key", re.compile(r"(?<![A-Za-z0-9])(?P<prefix>AIza)[0-9A-Za-z_-]{35}")),
    ("Stripe live key", re.compile(r"(?<![A-Za-z0-9])(?P<prefix>[sr]k_live_)[0-9A-Za-z]{16,}")),
    (
        "private key",
        re.compile(r"(?P<prefix>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)"),
    ),
)

SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
"""Environment variable names whose values are treated as secrets."""

# Names that match SECRET_ENV_NAME but hold a location or a setting, not the secret.
_NOT_SECRET_SUFFIX = re.compile(r"_(?:FILE|PATH|DIR|URL|HOST|PORT|ID)$", re.IGNORECASE)
_MIN_ENV_SECRET = 8


def _looks_like_token(body: str) -> bool:
    """Reject placeholders such as ``sk-ant-xxxxxxxx...``: real tokens mix letters and digits."""
    return any(c.isdigit() for c in body) and any(c.isalpha() for c in body)


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _scan_secrets(
    path: str, text: str, env: Mapping[str, str], old: str
) -> list[Finding]:
    found: list[Finding] = []
    spans: list[tuple[int, int]] = []
    for label, pattern in _SECRET_PATTERNS:
        for match in pattern.finditer(text):
            start, end = match.span()
            body = text[match.end("prefix"):end]
            if label != "private key" and not _looks_like_token(body):
                continue
            if any(s < end and start < e for s, e in spans):
                continue  # one secret, several formats (sk-ant- also looks like sk-)
            spans.append((start, end))
            if match.group() in old:
                continue
            shown = match.group("prefix") + ("…" if body else "")
            size = f" ({end - start} chars)" if body else ""
            found.append(Finding(
                "secret", path, f"{label} {shown}{size} at line {_line(text, start)}", True
            ))
    for name, value in sorted(env.items()):
        value = value.strip() if isinstance(value, str) else ""
        if (
            len(value) < _MIN_ENV_SECRET
            or not SECRET_ENV_NAME.search(name)
            or _NOT_SECRET_SUFFIX.search(name)
        ):
            continue
        index = text.find(value)
        if index < 0:
            continue
        if any(s < index + len(value) and index < e for s, e in spans):
            continue
        spans.append((index, index + len(value)))
        if value in old:
            continue
        found.append(Finding(
            "secret", path,
            f"the value of environment variable {name} at line {_line(text, index)}", True,
        ))
    return found


# ---------------------------------------------------------------------- PII

_EMAIL = re.compile(
    r"(?<![\w.+-])(?P<local>[A-Za-z0-9._%+-]+)@(?P<domain>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
)
_RESERVED_DOMAINS = re.compile(
    r"(?:^|\.)(?:example\.(?:com|org|net)|example|test|invalid|localhost|local)$", re.IGNORECASE
)
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)|\d{2,4})(?:[ .-]\d{2,4}){2,4}(?![\w-])"
)
_CARD = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _scan_pii(path: str, text: str, old: str) -> list[Finding]:
    found: list[Finding] = []
    for match in _EMAIL.finditer(text):
        domain = match.group("domain").rstrip(".")
        local = match.group("local").lower()
        if _RESERVED_DOMAINS.search(domain) or local == "git" or "noreply" in local:
            continue  # documentation domains, ``git@host:repo`` remotes, bot addresses
        if match.group() in old:
            continue
        found.append(Finding(
            "pii", path, f"email address …@{domain} at line {_line(text, match.start())}", True
        ))
    cards: list[tuple[int, int]] = []
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and _luhn(digits) and len(set(digits)) > 1:
            cards.append(match.span())
            if match.group() in old:
                continue
            found.append(Finding(
                "pii", path,
                f"card number ending {digits[-4:]} at line {_line(text, match.start())}", True,
            ))
    for match in _PHONE.finditer(text):
        start, end = match.span()
        if any(s < end and start < e for s, e in cards):
            continue
        raw = match.group()
        digits = re.sub(r"\D", "", raw)
        separated = raw.startswith("+") or "(" in raw or bool(re.search(r"\d[ .-]\d", raw))
        if not 9 <= len(digits) <= 15 or not separated or _looks_like_date_or_version(raw):
            continue
        if raw in old:
            continue
        found.append(Finding(
            "pii", path, f"phone number ending {digits[-2:]} at line {_line(text, start)}", True
        ))
    return found


def _looks_like_date_or_version(raw: str) -> bool:
    """``2024-01-15 10``, ``1.2.3.4``: digit groups that are not phone numbers."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}.*", raw):
        return True
    return bool(re.fullmatch(r"\d{1,3}(?:\.\d{1,3}){2,}", raw))


# ---------------------------------------------------------------------- scripts

_PYTHON_SUFFIXES = (".py", ".pyw")
_SHELL_SUFFIXES = (".sh", ".bash", ".zsh")
_NETWORK = "uses the network"

_PYTHON_RISKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("evaluates code", re.compile(r"(?<![\w.])(?:eval|exec|__import__)\s*\(")),
    (
        "spawns processes",
        re.compile(
            r"\bsubprocess\b|\bos\.(?:system|popen|spawn\w*|exec\w*|fork\w*|posix_spawn\w*)\b"
            r"|\bpty\.spawn\b"
        ),
    ),
    (
        _NETWORK,
        re.compile(
            r"\b(?:import|from)\s+(?:socket|urllib\d?|requests|httpx|aiohttp|http\.client"
            r"|ftplib|smtplib|telnetlib|paramiko)\b"
            r"|\b(?:socket|urllib\d?|requests|httpx|aiohttp)\.\w"
        ),
    ),
)
_PYTHON_CREDENTIALS = re.compile(
    r"\bos\.environ\b|\bos\.getenv\b|[~/]\.(?:ssh|aws|netrc|gnupg)\b|/etc/shadow|\bkeyring\b"
)

_SHELL_RISKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("evaluates code", re.compile(r"(?<![\w-])(?:eval|exec)(?![\w-])")),
    (
        "spawns processes",
        re.compile(
            r"\b(?:sh|bash|zsh|python\d?(?:\.\d+)?)\s+-c\b|\b(?:nohup|setsid|disown)\b"
            r"|[^&|]&[ \t]*$",
            re.MULTILINE,
        ),
    ),
    (
        _NETWORK,
        re.compile(
            r"\b(?:curl|wget|ncat|netcat|socat|scp|ssh|rsync|telnet)\b|\bnc\s+-"
            r"|/dev/(?:tcp|udp)/"
        ),
    ),
)
_SHELL_CREDENTIALS = re.compile(
    r"\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD)\w*|\bprintenv\b|(?<![/\w])env[ \t]*(?:$|[|>])"
    r"|~/\.(?:ssh|aws|netrc|gnupg)\b|\.netrc\b|/etc/shadow",
    re.MULTILINE,
)


def _script_language(path: str, text: str) -> Literal["python", "shell"] | None:
    lower = path.lower()
    shebang = text.split("\n", 1)[0] if text.startswith("#!") else ""
    if lower.endswith(_PYTHON_SUFFIXES) or "python" in shebang:
        return "python"
    if lower.endswith(_SHELL_SUFFIXES) or shebang:
        return "shell"
    return None


def _scan_script(path: str, text: str, old: str | None) -> list[Finding]:
    found = _script_finding(path, text)
    if found is None:
        return []
    if old is not None:
        before = _script_finding(path, old)
        if before is not None and before.critical == found.critical and _labels(
            before
        ) == _labels(found):
            return []  # the file already did this before the proposal touched it
    return [found]


def _labels(finding: Finding) -> set[str]:
    return {label for label, _ in _PYTHON_RISKS + _SHELL_RISKS if label in finding.detail}


def _script_finding(path: str, text: str) -> Finding | None:
    language = _script_language(path, text)
    if language is None:
        return None
    body = text
    if text.startswith("#!"):  # the interpreter line (``/usr/bin/env bash``) is not code
        first, newline, rest = text.partition("\n")
        body = " " * len(first) + newline + rest  # same offsets, so line numbers hold
    risks, credentials = (
        (_PYTHON_RISKS, _PYTHON_CREDENTIALS) if language == "python"
        else (_SHELL_RISKS, _SHELL_CREDENTIALS)
    )
    what: list[str] = []
    for label, pattern in risks:
        match = pattern.search(body)
        if match is not None:
            what.append(f"{label} ({match.group().strip()!r}, line {_line(body, match.start())})")
    if not what:
        return None
    network = any(w.startswith(_NETWORK) for w in what)
    creds = credentials.search(body) if network else None
    if creds is not None:
        detail = (
            f"{language} script reads credentials ({creds.group().strip()!r}, line "
            f"{_line(body, creds.start())}) and {'; '.join(what)}: a possible exfiltration"
        )
        return Finding("script", path, detail, True)
    return Finding("script", path, f"{language} script " + "; ".join(what), False)


def _scan_destructive(path: str, text: str, old: str) -> list[Finding]:
    """Destructive commands in any text; one already in the file before is not reported."""
    before = {what for _critical, what, _at in scan_destructive(old)} if old else set()
    found: list[Finding] = []
    seen: set[str] = set()
    for critical, what, at in scan_destructive(text):
        if what in before or what in seen:
            continue
        seen.add(what)
        found.append(Finding("destructive", path, f"{what} at line {_line(text, at)}", critical))
    return found


# ---------------------------------------------------------------------- scanning


def _texts(ops: Mapping[str, str | None]) -> Iterator[tuple[str, str]]:
    for path, text in ops.items():
        if isinstance(text, str):
            yield str(path), text


def scan_ops(
    ops: Mapping[str, str | None],
    *,
    env: Mapping[str, str] = os.environ,
    pii: bool = False,
    max_bytes: int = 64_000,
    base: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Every finding in the written files of ``ops`` (deletions carry nothing).

    ``base`` is the artifact before the proposal (``{path: text}``): a secret,
    PII or script behaviour already present in the same file is not reported,
    so a file that always held an example key does not block every edit of it.
    Pure: it decides nothing; ``Guardrails.check`` turns findings into refusals.
    """
    findings: list[Finding] = []
    for path, text in _texts(ops):
        before = base.get(path) if base is not None else None
        old = before if isinstance(before, str) else ""
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            findings.append(Finding(
                "size", path, f"{size} bytes, more than the {max_bytes} allowed per file", False
            ))
        findings.extend(_scan_secrets(path, text, env, old))
        if pii:
            findings.extend(_scan_pii(path, text, old))
        findings.extend(_scan_script(path, text, before if isinstance(before, str) else None))
        findings.extend(_scan_destructive(path, text, old))
    return findings


# ---------------------------------------------------------------------- settings


class GuardrailsTripped(RunStopped):
    """The ``violation_limit``-th critical violation: the run must end, never retried.

    ``error`` is how a report names it (``Guardrails: ...``).
    """

    def __init__(self, message: str) -> None:
        super().__init__("Guardrails", message)


class Guardrails:
    """Per-run gate on proposals: refuses what must not land, counts critical violations.

    Thread-safe: workers may call ``check`` concurrently.  ``env=None`` reads
    ``os.environ`` at each check, so keys set after start-up are covered too.
    """

    def __init__(
        self,
        *,
        script_policy: ScriptPolicy = "warn",
        violation_limit: int = 3,
        pii: bool = False,
        env: Mapping[str, str] | None = None,
        max_bytes: int = 64_000,
    ) -> None:
        if script_policy not in ("warn", "reject"):
            raise ValueError(
                f"script_policy must be 'warn' or 'reject', got {script_policy!r} "
                f"(ini evolve_script_policy)"
            )
        if isinstance(violation_limit, bool) or not isinstance(violation_limit, int) or (
            violation_limit < 1
        ):
            raise ValueError(
                f"violation_limit must be an integer >= 1, got {violation_limit!r} "
                f"(ini evolve_violation_limit)"
            )
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive integer, got {max_bytes!r}")
        self.script_policy: ScriptPolicy = script_policy
        self.violation_limit = violation_limit
        self.pii = pii
        self.max_bytes = max_bytes
        self._env = env
        self._lock = threading.Lock()
        self._violations = 0
        self._last: str | None = None
        self._warned: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return (
            f"Guardrails(script_policy={self.script_policy!r}, "
            f"violation_limit={self.violation_limit}, pii={self.pii}, "
            f"violations={self.violations})"
        )

    def describe(self) -> dict[str, object]:
        """The ``guardrails`` section of a report: what was checked and what was counted."""
        with self._lock:
            return {"secrets": True, "pii": self.pii, "scripts": self.script_policy,
                    "violation_limit": self.violation_limit, "violations": self._violations,
                    "warnings": len(self._warned)}

    def warnings_for(self, findings: list[Finding]) -> list[str]:
        """Warning lines for the findings not warned about before in this run."""
        out: list[str] = []
        with self._lock:
            for finding in findings:
                key = (finding.path, re.sub(r" at line \d+|, line \d+", "", finding.detail))
                if finding.critical or key in self._warned:
                    continue
                self._warned.add(key)
                out.append(f"guardrails: {finding.kind} warning in {finding.path}: "
                           f"{finding.detail}")
        return out

    @property
    def violations(self) -> int:
        """Critical violations seen so far (one per refused proposal)."""
        with self._lock:
            return self._violations

    @property
    def tripped(self) -> str | None:
        """The reason to stop the run once ``violation_limit`` critical violations happened."""
        with self._lock:
            if self._violations < self.violation_limit:
                return None
            return (
                f"guardrails stopped the run after {self._violations} critical violations "
                f"(evolve_violation_limit={self.violation_limit}); last: {self._last}. "
                f"Check what the proposer is shown (test output echoing credentials?) "
                f"before running again"
            )

    def check(
        self, ops: Mapping[str, str | None], *, base: Mapping[str, str] | None = None
    ) -> list[Finding]:
        """Refuse ``ops`` (RefusalError) or return its non-fatal findings (warnings).

        Precedence: secrets and PII (category ``secret``), then an exfiltrating
        script or a critical destructive command, then oversized files, then a
        flagged script or risky command under ``reject``.  ``base`` (the
        artifact before the proposal) exempts what was already there; see
        ``scan_ops``.  Raises :class:`GuardrailsTripped` instead of the refusal
        when this critical violation is the ``violation_limit``-th.
        """
        env = os.environ if self._env is None else self._env
        findings = scan_ops(ops, env=env, pii=self.pii, max_bytes=self.max_bytes, base=base)
        critical = [f for f in findings if f.critical]
        if critical:
            self._count(critical)
            tripped = self.tripped
            if tripped is not None:
                raise GuardrailsTripped(tripped)
        leaked = [f for f in critical if f.kind in ("secret", "pii")]
        if leaked:
            secret = any(f.kind == "secret" for f in leaked)
            raise _refusal(
                "secret", "secret-in-proposal" if secret else "pii-in-proposal", leaked,
                "; never write credentials into the artifact: refer to the environment "
                "variable by name instead" if secret
                else "; remove personal data from the artifact (or run without PII checks)")
        wiping = [f for f in critical if f.kind == "destructive"]
        if wiping:
            raise _refusal(
                "invalid-proposal", "destructive-command", wiping,
                "; such a command destroys the machine or its data wherever it runs, so it "
                "is refused under every script policy")
        if critical:
            raise _refusal(
                "invalid-proposal", "script-exfiltration", critical,
                "; artifact scripts may not send credentials over the network")
        sizes = [f for f in findings if f.kind == "size"]
        if sizes:
            raise _refusal(
                "oversized", "file-too-large", sizes,
                "; make a smaller change or split the content over several files",
                verb="writes")
        scripts = [f for f in findings if f.kind in ("script", "destructive")]
        if scripts and self.script_policy == "reject":
            raise _refusal(
                "invalid-proposal", "script-policy", scripts,
                ", refused under scripts=reject (ini evolve_guardrails, or its alias "
                "evolve_script_policy); achieve the goal without eval/exec, processes, "
                "network access or commands outside the artifact, or set scripts=warn")
        return findings

    def _count(self, critical: list[Finding]) -> None:
        with self._lock:
            self._violations += 1
            self._last = _listing(critical)


def _refusal(category: str, code: str, found: list[Finding], advice: str, *,
             verb: str = "contains") -> RefusalError:
    """The one shape of a guardrail refusal: what was found, where, and what to do."""
    return RefusalError(category, code, f"the proposal {verb} {_listing(found)}{advice}",
                        path=found[0].path)


def _listing(findings: list[Finding]) -> str:
    return "; ".join(f"{f.detail} in {f.path!r}" for f in findings)
