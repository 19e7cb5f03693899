"""The environment a candidate's tests run with: an allowlist, never the host's whole env.

Candidate code is untrusted, so only what the agent under test needs is passed
(model API keys and endpoints, locale, PATH).  CI credentials are refused even
when a user allowlists them by mistake: a pattern such as ``*`` still never
lets ``GITHUB_TOKEN`` through, and naming one of them outright is an error so
the user learns why it is missing instead of debugging a silent drop.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_ENV_ALLOWLIST: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
)
"""Host variables passed by default (``evolve_env`` ini replaces it); fnmatch patterns."""

NEVER_PASSED: tuple[str, ...] = (
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
    "ACTIONS_*",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_CACHE_URL",
    "ACTIONS_RESULTS_URL",
    "RUNNER_TOKEN",
    "GIT_ASKPASS",
    "SSH_AUTH_SOCK",
    "DOCKER_AUTH_CONFIG",
    "PYPI_TOKEN",
    "TWINE_PASSWORD",
    "NPM_TOKEN",
    "CODECOV_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)
"""Credentials of the CI and the user's shell that candidate code must never see."""


def is_never_passed(name: str) -> bool:
    """Is ``name`` one of the refused variables (patterns in :data:`NEVER_PASSED` included)?"""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in NEVER_PASSED)


def _check_allow(allow: Sequence[str]) -> None:
    if isinstance(allow, str):
        raise TypeError(
            f"the environment allowlist must be a sequence of names/patterns, got the string "
            f"{allow!r}: pass [{allow!r}]"
        )
    for entry in allow:
        if not isinstance(entry, str) or not entry:
            raise ValueError(f"environment allowlist entry {entry!r} must be a non-empty name")
        if any(ch in entry for ch in "*?[") or not is_never_passed(entry):
            continue
        raise ValueError(
            f"evolve_env names {entry!r}, which is never passed to candidate code: it is a "
            "credential (CI or registry token) that a candidate could print or send away. "
            "Remove it from evolve_env; give the agent a narrower key of its own instead"
        )


def allowed_variables(host_env: Mapping[str, str], allow: Sequence[str]) -> dict[str, str]:
    """The variables of ``host_env`` matching ``allow`` (fnmatch), minus :data:`NEVER_PASSED`."""
    return {name: value for name, value in host_env.items()
            if not is_never_passed(name)
            and any(fnmatch.fnmatchcase(name, pattern) for pattern in allow)}


def child_environment(
    host_env: Mapping[str, str],
    allow: Sequence[str] = DEFAULT_ENV_ALLOWLIST,
    *,
    scratch: Path,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The complete environment of one child run.

    Host variables matching ``allow`` (case-sensitive fnmatch patterns), minus
    the :data:`NEVER_PASSED` ones; then ``HOME`` and ``TMPDIR`` inside
    ``scratch`` (both created), ``PYTHONNOUSERSITE=1`` so the host user's site
    packages stay out; ``extra`` (the caller's own variables) last, overriding.
    """
    _check_allow(allow)
    env = allowed_variables(host_env, allow)
    home = scratch / "home"
    tmp = scratch / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra or {})
    return env
