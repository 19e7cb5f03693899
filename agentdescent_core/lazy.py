"""Names a package exports but imports on first use (PEP 562 module ``__getattr__``).

A package's ``__init__`` runs whenever any module inside it is imported, and the
pytest plugin imports a few small modules of this engine in every pytest process,
including each child run that scores a candidate (hundreds per evolution).  So a
package ``__init__`` here lists its public names with the module that defines them
and imports nothing: importing ``agentdescent_core.artifacts.diff`` must not pay
for ``FileTree`` and pathspec, nor ``agentdescent_core.evaluation.journal`` for the
verifier protocol.  Type checkers see the names through each package's
``if TYPE_CHECKING:`` block.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, exporting ``{name: module}``.

    A name is imported from its module on first access and then stored in the
    package, so later look-ups never reach ``__getattr__`` again.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
