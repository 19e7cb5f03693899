"""An isolated git configuration for every git command the ledger runs.

The ledger works inside the user's own repository, so whatever their machine is
configured to do on a commit must not leak into ours: a global
``commit.gpgSign`` would prompt for a passphrase, a ``core.hooksPath`` would run
their hooks, an ``includeIf`` could pull in anything.  Every git process we start
therefore gets:

- ``GIT_CONFIG_NOSYSTEM=1`` and ``GIT_CONFIG_GLOBAL`` = ``os.devnull``: no system or
  global configuration; only the repository's own ``.git/config`` is read;
- command-line scoped overrides (``GIT_CONFIG_COUNT``) that switch off signing,
  hooks, fsmonitor and automatic gc/maintenance even if ``.git/config`` enables
  them, and mark the repository a ``safe.directory`` — the user pointed us at it,
  and pytest already imports its conftest.py, so refusing it over file ownership
  (common in CI containers) would only break runs, not protect anyone;
- no attributes file the repository names (``core.attributesFile``), no system
  attributes (``GIT_ATTR_NOSYSTEM``), no transport (``protocol.allow=never``: a
  partial clone would fetch a missing object through a remote its config defines);
- for commands that read only objects (the workspace's ``read-tree`` and
  ``checkout-index``), :func:`objects_only_env`: a private git directory, so the
  user's ``.git/config``, ``info/attributes`` and hooks are not even read; for
  ``git status`` on the user's tree (which cleans stat-dirty files),
  :func:`with_neutral_filters` empties every filter driver the configuration
  defines.  Under ``local`` a candidate can write ``.git/config``, and a filter
  must never run in the controller.  The ledger's plumbing needs neither: it
  runs no command that converts a file (``hash-object --no-filters``, object
  reads, ref updates);
- ``GIT_TERMINAL_PROMPT=0`` so nothing ever waits for a password;
- a fixed author/committer identity (``agentdescent
  <agentdescent@users.noreply.github.com>`` unless the caller passes another);
- ``GIT_DIR`` / ``GIT_WORK_TREE`` set to this repository and ``GIT_INDEX_FILE`` set
  to a private path that does not exist.  GitPython can only add variables to the
  inherited environment, not remove them, and a pre-commit hook runs with the
  hook's ``GIT_DIR`` and ``GIT_INDEX_FILE`` exported; pinning them here means an
  inherited value can never redirect us to another repository or to the user's
  index (no command we run needs an index at all).

Most of this is defence in depth: trees and commits are written in-process
(:mod:`.objects`), so signing never comes up, and no porcelain that runs hooks
is ever invoked — but ``git update-ref`` would run a ``reference-transaction``
hook, and that is switched off here.

The environment is applied with ``repo.git.update_environment`` on repositories the
ledger opens itself; ``os.environ`` is never modified.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

DEFAULT_IDENTITY: tuple[str, str] = ("agentdescent", "agentdescent@users.noreply.github.com")

#: Inherited variables that would point git at other object stores or namespaces;
#: when the parent process has them we pin them to neutral values.
_NEUTRALISED_IF_INHERITED: Mapping[str, str] = {
    "GIT_NAMESPACE": "",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
    "GIT_CONFIG_PARAMETERS": "",
}


def config_overrides(safe_directory: str | None = None) -> list[tuple[str, str]]:
    """The configuration forced on every command, strongest scope (command line)."""
    pairs = [
        ("commit.gpgSign", "false"),
        ("tag.gpgSign", "false"),
        ("core.hooksPath", os.devnull),
        ("core.fsmonitor", "false"),
        ("core.untrackedCache", "false"),
        ("gc.auto", "0"),
        ("maintenance.auto", "false"),
        ("i18n.commitEncoding", "UTF-8"),
        ("i18n.logOutputEncoding", "UTF-8"),
        ("core.quotePath", "false"),
        # Nothing the repository's own config names may run in this process: no
        # attributes file of its choosing, no transport (a partial clone would
        # otherwise fetch missing objects through a remote the config defines).
        ("core.attributesFile", os.devnull),
        ("protocol.allow", "never"),
    ]
    if safe_directory is not None:
        pairs.append(("safe.directory", safe_directory))
    return pairs


def validate_identity(identity: tuple[str, str]) -> tuple[str, str]:
    """Refuse names/emails that would corrupt a commit header."""
    from agentdescent_core.errors import LedgerError

    if not (isinstance(identity, tuple) and len(identity) == 2):
        raise LedgerError(f"identity must be a (name, email) tuple, got {identity!r}")
    name, email = identity
    for label, value in (("name", name), ("email", email)):
        if not isinstance(value, str) or not value.strip():
            raise LedgerError(f"identity {label} must be a non-empty string, got {value!r}")
        if any(ch in value for ch in "<>\n\r\0"):
            raise LedgerError(
                f"identity {label} {value!r} contains '<', '>', a newline or NUL; "
                "git commit headers cannot hold those characters"
            )
    return name.strip(), email.strip()


def isolated_env(
    *,
    git_dir: str,
    common_dir: str | None = None,
    work_tree: str | None,
    private_index: str,
    identity: tuple[str, str] = DEFAULT_IDENTITY,
    inherited: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment variables to add to every git invocation on one repository.

    ``inherited`` is the environment the git process would otherwise inherit
    (``os.environ`` by default); it is only read, to decide which inherited
    variables must be neutralised.
    """
    name, email = validate_identity(identity)
    inherited = os.environ if inherited is None else inherited
    env: dict[str, str] = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GIT_EDITOR": ":",
        "GIT_PAGER": "cat",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_DIR": git_dir,
        "GIT_INDEX_FILE": private_index,
    }
    if work_tree is not None:
        env["GIT_WORK_TREE"] = work_tree
    for key, neutral in _NEUTRALISED_IF_INHERITED.items():
        if key in inherited:
            env[key] = neutral
    common_dir = common_dir or git_dir
    if "GIT_OBJECT_DIRECTORY" in inherited:
        env["GIT_OBJECT_DIRECTORY"] = os.path.join(common_dir, "objects")
    if "GIT_COMMON_DIR" in inherited:
        env["GIT_COMMON_DIR"] = common_dir
    overrides = config_overrides(safe_directory=work_tree or git_dir)
    env["GIT_CONFIG_COUNT"] = str(len(overrides))
    for i, (key, value) in enumerate(overrides):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def _append_overrides(env: dict[str, str], pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    out = dict(env)
    count = int(out.get("GIT_CONFIG_COUNT", "0"))
    for key, value in pairs:
        out[f"GIT_CONFIG_KEY_{count}"] = key
        out[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    out["GIT_CONFIG_COUNT"] = str(count)
    return out


def configured_filters(env: Mapping[str, str], cwd: str) -> list[str]:
    """Names of the filter drivers (``filter.<name>.*``) the configuration git reads defines.

    Asked of ``git config --list --includes`` with ``env`` (an :func:`isolated_env`),
    so includes and ``includeIf`` are resolved exactly as the command would.
    """
    done = subprocess.run(
        ["git", "config", "--list", "--includes", "-z"], cwd=cwd, env={**os.environ, **env},
        capture_output=True, check=False, timeout=60,
    )
    names: set[str] = set()
    for item in done.stdout.split(b"\0"):
        key = item.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        if key.lower().startswith("filter.") and key.count(".") >= 2:
            names.add(key[len("filter."):key.rfind(".")])
    return sorted(names)


def with_neutral_filters(env: Mapping[str, str], cwd: str) -> dict[str, str]:
    """``env`` plus overrides that empty every filter driver the repository configures.

    A ``smudge``/``clean``/``process`` command defined in ``.git/config`` and
    named by an attribute (``* filter=x`` in ``.git/info/attributes``) would run
    in the controller whenever git converts a file (``git status`` cleans a
    stat-dirty file, a checkout smudges).  An empty command is no filter, and
    ``required=false`` keeps git from failing over it.  The names are read when
    this is called: a driver added to the config afterwards is not covered, so
    call it right before the command (or use :func:`objects_only_env`, which
    reads no repository config at all).
    """
    pairs: list[tuple[str, str]] = []
    for name in configured_filters(env, cwd):
        pairs += [(f"filter.{name}.clean", ""), (f"filter.{name}.smudge", ""),
                  (f"filter.{name}.process", ""), (f"filter.{name}.required", "false")]
    return _append_overrides(dict(env), pairs)


def objects_only_env(
    *,
    common_dir: str,
    shadow_dir: str,
    work_tree: str,
    private_index: str,
    object_format: str = "sha1",
) -> dict[str, str]:
    """Environment for commands that need only the user's objects (copying a commit out).

    ``GIT_DIR`` is ``shadow_dir``, a private skeleton repository created here
    with a configuration of our own, and ``GIT_OBJECT_DIRECTORY`` the user's
    object store (its ``info/alternates`` still apply).  So the user's
    ``.git/config``, ``.git/info/attributes`` and hooks are never read: no
    filter driver, fsmonitor or hook a candidate planted there can run, even
    one planted a moment ago by a run in another workspace.  Attributes
    committed in the tree (``.gitattributes``) still apply (line endings), but
    with no driver configured a ``filter=`` attribute does nothing.
    """
    os.makedirs(os.path.join(shadow_dir, "refs"), exist_ok=True)
    os.makedirs(os.path.join(shadow_dir, "objects"), exist_ok=True)
    with open(os.path.join(shadow_dir, "HEAD"), "w", encoding="utf-8") as handle:
        handle.write("ref: refs/heads/agentdescent-workspace\n")
    version, extension = ("1", f"[extensions]\n\tobjectformat = {object_format}\n") \
        if object_format != "sha1" else ("0", "")
    with open(os.path.join(shadow_dir, "config"), "w", encoding="utf-8") as handle:
        handle.write(f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n"
                     + extension)
    env = isolated_env(git_dir=shadow_dir, work_tree=work_tree, private_index=private_index)
    env["GIT_COMMON_DIR"] = shadow_dir
    env["GIT_OBJECT_DIRECTORY"] = os.path.join(common_dir, "objects")
    env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ""
    return env
