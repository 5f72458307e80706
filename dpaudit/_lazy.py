"""Lazy re-exports and lazy submodules for package ``__init__`` modules (PEP 562).

A package's public names are listed once, name → defining module, and imported on first
use, so that importing a package (``dpaudit``, or a family such as ``dpaudit.membership``
when one of its light modules is needed) does not pay for torch or scipy.

A package may also name submodules that load on first use: ``from dpaudit.dpsgd import
units`` at the top of a kind adapter then binds ``dpaudit.dpsgd.units`` without running
it: its code runs the first time one of its attributes is read (inside a function),
so that loading an audit file never imports the machinery behind it. This is the one
place dpaudit defers an import; modules import each other by name everywhere else.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


def lazy_module(name: str) -> ModuleType:
    """The module ``name``, imported now if it is, else registered to load on first use.

    A module not imported yet is put in ``sys.modules`` through
    :class:`importlib.util.LazyLoader`: it is the real module object, whose code runs the
    first time one of its attributes is read. ``import name`` elsewhere then returns the
    same object, and a patch (``monkeypatch.setattr``) made through either is the same
    patch.
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    *,
    modules: tuple[str, ...] = (),
    submodules: tuple[str, ...] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` re-exporting ``exports`` lazily.

    Args:
        package: the package's ``__name__``.
        exports: public name → the module that defines it.
        modules: names that ARE their module (``dpaudit.theory``), not an attribute of it.
        submodules: the package's own submodules that ``from package import name`` binds
            without running them: :func:`lazy_module`, run on the first attribute read.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in submodules:
            module = lazy_module(f"{package}.{name}")
            namespace[name] = module
            return module
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if name in modules else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports) | set(submodules))

    return __getattr__, __dir__
