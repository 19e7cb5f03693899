"""The optional dependencies (pip extras) and the one check that asks for them.

The base install runs the offline path (hook proposers, the ``local`` and
``bwrap`` sandboxes).  The model SDKs, the docker SDK and Dask distributed are extras, so a
module that needs one imports it where it builds its client, after
:func:`require_extra` has turned an absent package into a
:class:`~agentdescent_core.errors.MissingExtra` naming the ``pip install`` to
run — never at import time of a module the base path loads.
"""

from __future__ import annotations

import importlib
from typing import Literal

from agentdescent_core.errors import MissingExtra

Extra = Literal["anthropic", "openai", "docker", "dask"]

#: extra -> (the module it provides, what it is called in messages)
EXTRAS: dict[str, tuple[str, str]] = {
    "anthropic": ("anthropic", "the anthropic SDK"),
    "openai": ("openai", "the openai SDK"),
    "docker": ("docker", "the docker SDK"),
    "dask": ("distributed", "Dask distributed"),
}


def require_extra(extra: Extra) -> None:
    """Import the module of ``extra``, or raise MissingExtra naming the pip command.

    When: just before a client of an optional SDK is built, so the user who
    asked for that feature learns which extra to install; call it, then import
    the module as usual (the import is then cached and typed).  Only an absent
    module is turned into MissingExtra: an SDK that is installed but fails on
    import raises its own error, which is a different problem.
    """
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}: one of {', '.join(sorted(EXTRAS))}")
    module, what = EXTRAS[extra]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name != module and not exc.name.startswith(module + "."):
            raise  # the SDK is there but one of its own dependencies is not
        raise MissingExtra(module=module, extra=extra, what=what) from None
