"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package's public names are listed once, name → defining module, and imported on first
use, so that importing a package (``dpaudit``, or a family such as ``dpaudit.membership``
when one of its light modules is needed) does not pay for torch or scipy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], *, modules: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` re-exporting ``exports`` lazily.

    Args:
        package: the package's ``__name__``.
        exports: public name → the module that defines it.
        modules: names that ARE their module (``dpaudit.theory``), not an attribute of it.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if name in modules else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
