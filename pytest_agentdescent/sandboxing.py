"""Choosing a sandbox backend and opening the verifier, for ``pytest --evolve`` and ``review``.

Both evaluate candidates the same way, so both must refuse the same unusable
setups with the same words; only the option a message names differs
(``--evolve-sandbox`` for the plugin, ``--sandbox`` for ``agentdescent review``).
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.evaluation.cache import EvalCache
    from agentdescent_core.evaluation.executor import Executor
    from agentdescent_core.evaluation.protocol import TaskSplit
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.governance import FrozenSet
    from agentdescent_core.sandbox.spec import Backend


def usable_backend(name: str, *, option: str) -> Backend:
    """The backend ``name`` (``auto`` picks), or ValueError saying why it cannot run here.

    ``option`` is the command-line option that chose it, named in the message.
    An unknown name is ValueError too (from ``get_backend``).
    """
    from agentdescent_core.sandbox.select import get_backend

    backend = get_backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        raise ValueError(
            f"{option} {name}: the {backend.name} backend is not usable here ({reason}); "
            f"install it, or choose another with {option} (auto picks the strongest that works)"
        )
    return backend


def plugin_args(args: Sequence[str], environ: Mapping[str, str] | None = None
                ) -> tuple[str, ...]:
    """The ``-p`` options of a pytest command line, for the child runs to load the same plugins.

    Whoever runs ``pytest --evolve skills -p no:randomly`` compares the
    baseline with what ``pytest -p no:randomly`` says; a child that loaded
    every installed plugin would measure another suite.  ``PYTEST_ADDOPTS``
    of ``environ`` counts as the start of the command line, as pytest reads
    it (the children's scrubbed environment does not carry it).  This
    plugin's own modules are left out (the child loads its recorder itself),
    and so is anything after ``--``.
    """
    addopts = shlex.split((environ or {}).get("PYTEST_ADDOPTS", ""))
    return (*_p_options(addopts), *_p_options(args))


def _p_options(args: Sequence[str]) -> list[str]:
    found: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            break
        if word == "-p":
            value = next(words, "")
        elif word.startswith("-p") and len(word) > 2:
            value = word[2:]
        else:
            continue
        name = value.removeprefix("no:")
        if value and not (name == "agentdescent" or name.startswith("pytest_agentdescent")):
            found += ["-p", value]
    return found


def open_verifier(repo: Path, base: str, split: TaskSplit, *, tree: FileTree,
                  frozen: FrozenSet, backend: Backend, cache: EvalCache | None,
                  env_allow: Sequence[str], network: str, test_timeout: float,
                  eval_concurrency: int, subdir: str, pytest_args: Sequence[str] = (),
                  select: str = "all", executor: Executor | None = None
                  ) -> tuple[SandboxedVerifier, list[str]]:
    """A SandboxedVerifier at ``base`` and the warnings it gave while setting up.

    ``pytest_args`` go to every child's command line (:func:`plugin_args` of
    the user's).  ``select`` is ``reads`` for ``pytest --evolve``'s read-based
    selection; ``agentdescent review`` keeps ``all``: a review runs the full suite.
    ``executor`` runs the children on a cluster (:func:`open_cluster`), None here.
    SandboxSetupError and ValueError propagate for the caller
    to word.
    """
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verifier = SandboxedVerifier(
            repo, base, split, tree=tree, frozen=frozen, backend=backend, cache=cache,
            env_allow=tuple(env_allow), network=network,  # type: ignore[arg-type]
            test_timeout=test_timeout, eval_concurrency=eval_concurrency, subdir=subdir,
            pytest_args=tuple(pytest_args), select=select, executor=executor,
        )
    return verifier, [str(w.message) for w in caught]


def open_cluster(spec: str, backend: Backend, *, option: str) -> Executor | None:
    """The executor ``spec`` names, connected and checked; None for ``local``.

    Connected before anything of the run changes (no ref is created when the
    cluster cannot be reached).  ValueError (a missing extra, an unreachable
    scheduler, a worker that differs from this machine) names ``option``, the
    address and what to do.
    """
    from agentdescent_core.errors import MissingExtra
    from agentdescent_core.evaluation.executor import ExecutorError, open_executor, parse_executor

    parsed = parse_executor(spec)
    if parsed.is_local:
        return None
    try:
        return open_executor(parsed, backend=backend.name)
    except MissingExtra as exc:
        raise ValueError(f"{option} {spec} needs {exc.what}: {exc.pip_command}") from None
    except ExecutorError as exc:
        raise ValueError(str(exc)) from None
