"""Tamper evidence inside the child pytest: candidate code that reaches into the judge.

A skill folder's module imported by a test runs inside the child pytest that
judges it.  From there it could rewrite the recorder (patch
``combine_reports``), rewrite pytest (``Function.runtest``), or read the
expected answer out of the test's stack frame.  This module is how the
recorder notices; it never raises into the code it watches.

* :class:`Watch` is an audit hook (:func:`sys.addaudithook`, installed when the
  recorder is imported, before any conftest or test module) for the events
  CPython 3.11 raises when code takes hold of frames or other objects' insides:
  ``sys._getframe``, ``sys._current_frames``, reading ``tb_frame`` /
  ``gi_frame`` / ``cr_frame`` / ``ag_frame``, ``gc.get_referrers`` /
  ``get_referents`` / ``get_objects``, ``sys.settrace`` / ``setprofile``, every
  ``ctypes.*`` event, and ``object.__setattr__`` of ``__code__`` (or of anything
  on the recorder's own functions and classes).  For each it finds *the caller*:
  the nearest frame outside the standard library's frame-handing helpers
  (``inspect``, ``traceback``, ``ctypes``, the import machinery), so a skill
  calling ``inspect.currentframe()`` is its caller, while ``namedtuple`` or
  ``logging`` reading their caller's module name are their own callers.  When
  the caller's file is under an artifact root, the event is reported.
  Reading attributes of a frame (``f_back``, ``f_locals``) and setting plain
  module attributes raise no audit event in CPython; they are what
  :class:`Integrity` is for.
* :class:`Integrity` snapshots the attributes of the modules and classes that
  decide a verdict (the recorder's own modules; pytest's runner, reports,
  nodes and python modules) and, when asked, names every one that now holds
  something else; :class:`Planted` names every attribute of a library module
  that now holds a function or class defined under an artifact root.

What remains possible for code in the test process is said in ``docs/sandbox.md``:
a C extension, or pure Python that reaches the recorder's objects through
routes that raise no event, can still change that run's results.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType, FunctionType, MethodType, ModuleType
from typing import Any

#: Audit events that hand out frames or raw memory (``ctypes.*`` is matched by prefix).
WATCHED_EVENTS: frozenset[str] = frozenset({
    "sys._getframe", "sys._current_frames",
    "gc.get_referrers", "gc.get_referents", "gc.get_objects",
    "sys.settrace", "sys.setprofile",
    "object.__getattr__", "object.__setattr__", "object.__delattr__",
})
#: The attribute reads (``object.__getattr__``) that yield a frame.
FRAME_ATTRS: frozenset[str] = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})

_STDLIB = os.path.dirname(os.__file__)
#: Standard-library files that hand frames or memory to their caller: the
#: caller of these is the one that asked.
_PASS_THROUGH = frozenset({
    os.path.join(_STDLIB, "inspect.py"),
    os.path.join(_STDLIB, "traceback.py"),
})
_PASS_THROUGH_DIRS = (os.path.join(_STDLIB, "ctypes") + os.sep,)
_TRACEBACK = os.path.join(_STDLIB, "traceback.py")


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def _roots(paths: Iterable[str]) -> tuple[str, ...]:
    found: list[str] = []
    for path in paths:
        for form in (os.path.abspath(path), os.path.realpath(path)):
            if form not in found:
                found.append(form.rstrip(os.sep) or os.sep)
    return tuple(found)


class Watch:
    """The audit hook; ``report(what, file)`` is called once per distinct finding.

    ``roots`` are the artifact roots' absolute paths as the child sees them,
    ``workspace`` the directory findings are named relative to, ``protected``
    the objects whose attributes nobody may set (the recorder's functions and
    classes).  Cheap for the events it does not watch: one frozenset lookup.
    """

    def __init__(self, roots: Iterable[str], workspace: str,
                 report: Callable[[str, str], None], protected: Iterable[object] = ()) -> None:
        self._roots = _roots(roots)
        self._workspace = os.path.abspath(workspace)
        self._report = report
        self._protected = frozenset(id(obj) for obj in protected)
        self._busy: set[int] = set()
        self._seen: set[tuple[str, str]] = set()
        self._files: dict[str, bool] = {}
        self._get_ident = threading.get_ident
        self._getframe = sys._getframe

    def install(self) -> None:
        """Add the hook to this interpreter (it cannot be removed again, by design)."""
        if self._roots:
            sys.addaudithook(self._hook)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Run the recorder's own introspection on this thread without reporting it."""
        ident = self._get_ident()
        already = ident in self._busy
        self._busy.add(ident)
        try:
            yield
        finally:
            if not already:
                self._busy.discard(ident)

    def relative(self, path: str) -> str:
        """``path`` relative to the workspace when it lies inside it."""
        if _under(path, (self._workspace,)):
            return os.path.relpath(path, self._workspace)
        return path

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in WATCHED_EVENTS and not event.startswith("ctypes."):
            return
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in FRAME_ATTRS):
            return
        ident = self._get_ident()
        if ident in self._busy:
            return
        self._busy.add(ident)
        try:
            self._judge(event, args)
        except Exception:  # a watcher must never break the code it watches
            pass
        finally:
            self._busy.discard(ident)

    def _judge(self, event: str, args: tuple[Any, ...]) -> None:
        caller = self._getframe(2)  # _judge <- _hook <- the code that raised the event
        if event in ("object.__setattr__", "object.__delattr__"):
            target, name = args[0], args[1]
            if id(target) in self._protected:
                file = self._culprit(caller) or caller.f_code.co_filename
                what = f"set {name} on the recorder's {getattr(target, '__qualname__', target)}"
                self._flag(what, file)
                return
            if name != "__code__":
                return
            what = f"replaced the code of {getattr(target, '__qualname__', target)!s}"
        elif event == "object.__getattr__":
            if args[1] == "tb_frame" and caller.f_code.co_filename == _TRACEBACK:
                return  # traceback formatting an exception it was handed
            what = f"read {args[1]} (a frame of the test process)"
        elif event.startswith("ctypes."):
            what = f"used ctypes ({event})"
        else:
            what = f"called {event}()"
        culprit = self._culprit(caller)
        if culprit is not None and self._is_artifact(culprit):
            self._flag(what, culprit)

    def _culprit(self, frame: FrameType | None) -> str | None:
        """The file of the nearest frame that is not a frame-handing helper."""
        while frame is not None:
            file = frame.f_code.co_filename
            if file in _PASS_THROUGH or file.startswith(_PASS_THROUGH_DIRS) \
                    or file.startswith("<frozen importlib"):
                frame = frame.f_back
                continue
            return file
        return None

    def _is_artifact(self, file: str) -> bool:
        known = self._files.get(file)
        if known is None:
            known = self._files[file] = _under(file, self._roots) or _under(
                os.path.realpath(file), self._roots)
        return known

    def _flag(self, what: str, file: str) -> None:
        where = self.relative(file)
        if (what, where) in self._seen:
            return
        self._seen.add((what, where))
        self._report(what, where)


_MISSING = object()


def origin(value: object) -> str:
    """The file that defines ``value`` (a function, method, class), or "" when unknown."""
    if isinstance(value, (classmethod, staticmethod, MethodType)):
        value = value.__func__
    code = getattr(value, "__code__", None)
    if code is not None:
        return str(code.co_filename)
    module = sys.modules.get(str(getattr(value, "__module__", "") or ""))
    return str(getattr(module, "__file__", "") or "")


class Integrity:
    """What the named modules and classes hold now, compared with what they held at start-up.

    ``strict`` modules and classes (the recorder's own) may not change at all;
    in the others (pytest's) only a value defined inside ``workspace``, or of
    unknown origin, counts: a plugin installed in site-packages that adapts
    pytest at import is not the candidate.
    """

    def __init__(self, strict: Sequence[ModuleType | type], loose: Sequence[ModuleType | type],
                 workspace: str) -> None:
        self._workspace = _roots([workspace])
        self._entries = [(self._label(obj), vars(obj), dict(vars(obj)), True) for obj in strict]
        self._entries += [(self._label(obj), vars(obj), dict(vars(obj)), False) for obj in loose]

    @staticmethod
    def _label(obj: ModuleType | type) -> str:
        if isinstance(obj, ModuleType):
            return obj.__name__
        return f"{obj.__module__}.{obj.__qualname__}"

    def changed(self) -> list[tuple[str, str]]:
        """(what changed, the file its new value comes from) for every replaced attribute."""
        found: list[tuple[str, str]] = []
        for label, live, snapshot, strict in self._entries:
            for name, value in snapshot.items():
                now = live.get(name, _MISSING)
                if now is value:
                    continue
                file = "" if now is _MISSING else origin(now)
                if not strict and file and not _under(file, self._workspace):
                    continue
                verb = "deleted" if now is _MISSING else "replaced"
                found.append((f"{verb} {label}.{name}", file))
        return found


class Planted:
    """Attributes of modules outside the workspace that now hold code from under the roots.

    A skill module that sets ``subprocess.run`` or ``_pytest.python.Function``
    to its own function is rewriting what the tests call; a test module that
    imports a skill function is not (test modules live in the workspace).  Each
    :meth:`scan` looks closely only at the modules whose values changed since
    the previous one (compared by identity at C speed), so it costs a few
    milliseconds in a process with hundreds of modules.
    """

    def __init__(self, roots: Sequence[str], workspace: str) -> None:
        self._roots = _roots(roots)
        self._space = _roots([workspace])
        self._known: dict[str, tuple[int, list[int]]] = {}
        self._kinds: dict[str, tuple[int, str, str]] = {}  # name -> (id, kind, file)
        self.scan()

    def _kind(self, name: str, module: ModuleType) -> tuple[str, str]:
        """``artifact``, ``workspace`` or ``library``, and the file; asked again only when
        ``sys.modules[name]`` is another module object than last time."""
        known = self._kinds.get(name)
        if known is None or known[0] != id(module):
            file = getattr(module, "__file__", None)
            path = os.path.abspath(file) if isinstance(file, str) else ""
            kind = ("artifact" if path and _under(path, self._roots) else
                    "workspace" if path and _under(path, self._space) else "library")
            known = self._kinds[name] = (id(module), kind, path)
        return known[1], known[2]

    def scan(self) -> list[tuple[str, str]]:
        """(what was set, the artifact file its value comes from), for the changed modules."""
        artifact: dict[int, str] = {}
        names: set[str] = set()
        library: list[tuple[str, ModuleType]] = []
        for name, module in list(sys.modules.items()):
            if not isinstance(module, ModuleType):  # type: ignore[redundant-expr,unused-ignore]
                continue  # type: ignore[unreachable,unused-ignore]  # sys.modules may hold anything
            kind, path = self._kind(name, module)
            if kind == "artifact":
                artifact[id(vars(module))] = path
                names.add(name)
            elif kind == "library":
                library.append((name, module))
        if not artifact and self._known:
            return []  # nothing of the candidate is loaded: nothing can have been planted
        changed: list[ModuleType] = []
        for name, module in library:
            ids = list(map(id, vars(module).values()))
            if self._known.get(name) != (id(vars(module)), ids):
                self._known[name] = (id(vars(module)), ids)
                changed.append(module)
        if not artifact:
            return []
        found: list[tuple[str, str]] = []
        for module in changed:
            for name, value in list(vars(module).items()):
                if isinstance(value, FunctionType):
                    file = artifact.get(id(value.__globals__), "")
                elif isinstance(value, type) and value.__module__ in names:
                    file = origin(value)
                else:
                    continue
                if file:
                    found.append((f"set {module.__name__}.{name} to its own "
                                  f"{getattr(value, '__qualname__', name)}", file))
        return found
