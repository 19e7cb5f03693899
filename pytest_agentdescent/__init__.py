"""pytest-agentdescent: the pytest plugin and the ``agentdescent`` command line."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # Looked up on first use: the plugin imports this package in every pytest process,
    # and reading the installed metadata costs more than the plugin's own modules.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("pytest-agentdescent")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()[name] = found
    return found
