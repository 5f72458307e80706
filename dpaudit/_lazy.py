"""Lazy re-exports and lazy submodules for package ``__init__`` modules (PEP 562).

A package's public names are listed once, name → defining module, and imported on first
use, so that importing a package (``dpaudit``, or a family such as ``dpaudit.membership``
when one of its light modules is needed) does not pay for torch or scipy.

A package may also name submodules that load on first use: ``from dpaudit.dpsgd import
units`` at the top of a kind adapter then binds a stand-in that imports
``dpaudit.dpsgd.units`` the first time one of its attributes is read (inside a function),
so that loading an audit file never imports the machinery behind it. This is the one
place dpaudit defers an import; modules import each other by name everywhere else.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


class LazySubmodule(ModuleType):
    """Stands for the submodule ``name`` until an attribute is read, then imports it.

    Every attribute read goes to the real module (nothing is copied), so a test that
    patches the real module is seen through the stand-in.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attribute)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__name__))

    def __repr__(self) -> str:
        return f"<lazy submodule {self.__name__!r}>"


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
            as a :class:`LazySubmodule` (imported on first attribute read) while they are
            not imported yet.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in submodules:
            full = f"{package}.{name}"
            return sys.modules.get(full) or LazySubmodule(full)
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
