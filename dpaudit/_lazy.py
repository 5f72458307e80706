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


class DeferredModule(ModuleType):
    """A stand-in for a module not imported yet, bound where the module will be used.

    Reading, setting or deleting any attribute it does not hold itself, or its
    ``__dict__``, imports the module (:func:`importlib.import_module`) and acts on it:
    ``stand_in.f`` is ``module.f``, and a patch (``monkeypatch.setattr(stand_in, ...)``) is
    a patch of the module, undone there.
    The stand-in is never put in :data:`sys.modules`: nothing that walks the loaded
    modules (``inspect.getmodule``, which torch calls while it loads) can start the import
    half-way through another module's, as a lazily loaded entry of ``sys.modules`` would.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def _module(self) -> ModuleType:
        return importlib.import_module(object.__getattribute__(self, "__name__"))

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        # the module's namespace: what `vars()` and a patch's record of the old value read
        return self._module().__dict__

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._module(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._module(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._module(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._module())

    def __repr__(self) -> str:
        return f"<deferred module {object.__getattribute__(self, '__name__')!r}>"


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` if it is imported, else a :class:`DeferredModule` that imports
    it on first use."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return DeferredModule(name)


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
