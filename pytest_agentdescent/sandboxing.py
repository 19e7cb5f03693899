"""Choosing a sandbox backend and opening the verifier, for ``pytest --evolve`` and ``review``.

Both evaluate candidates the same way, so both must refuse the same unusable
setups with the same words; only the option a message names differs
(``--evolve-sandbox`` for the plugin, ``--sandbox`` for ``agentdescent review``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.evaluation.cache import EvalCache
    from agentdescent_core.evaluation.protocol import TaskSplit
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.governance import FrozenSet
    from agentdescent_core.sandbox.spec import Backend

__all__ = ["open_verifier", "usable_backend"]


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


def open_verifier(repo: Path, base: str, split: TaskSplit, *, tree: FileTree,
                  frozen: FrozenSet, backend: Backend, cache: EvalCache | None,
                  env_allow: Sequence[str], network: str, test_timeout: float,
                  eval_concurrency: int, subdir: str) -> tuple[SandboxedVerifier, list[str]]:
    """A SandboxedVerifier at ``base`` and the warnings it gave while setting up.

    SandboxSetupError and ValueError propagate for the caller to word.
    """
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verifier = SandboxedVerifier(
            repo, base, split, tree=tree, frozen=frozen, backend=backend, cache=cache,
            env_allow=tuple(env_allow), network=network,  # type: ignore[arg-type]
            test_timeout=test_timeout, eval_concurrency=eval_concurrency, subdir=subdir,
        )
    return verifier, [str(w.message) for w in caught]
