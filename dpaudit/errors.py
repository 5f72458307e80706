"""The one exception hierarchy of dpaudit.

Every error a user can cause is a :class:`DpauditError` (a ``ValueError``), so that
``except ValueError`` keeps working for callers who do not know dpaudit, and the CLI
turns any of them into one line and exit code 2.
"""

from __future__ import annotations

import errno
import math
import numbers
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

_Choice = TypeVar("_Choice", bound=str)


class DpauditError(ValueError):
    """Root of every user-facing error in dpaudit.

    ``example``: a few lines of code that show the fix, set by :func:`with_example`; the
    CLI prints them under its one error line, and ``str()`` of the error ends with them.
    """

    example: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The error's one line (without its example)."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        if not self.example:
            return super().__str__()
        return "\n".join([self.message, *(f"    {line}" for line in self.example)])


_Error = TypeVar("_Error", bound=DpauditError)


def with_example(error: _Error, *lines: str) -> _Error:
    """``error`` with the lines of code that show its fix (``DpauditError.example``)."""
    error.example = tuple(lines)
    return error


class ConfigError(DpauditError):
    """An audit file (or its equivalent dict) is malformed."""


class DataError(DpauditError):
    """A dataset, column, file or split cannot be used as asked."""


class KindContractError(DpauditError):
    """An audit kind broke its contract with the audit (a bug in the kind, not in the
    user's input): e.g. it put more bounds into the verdict than it announced, which would
    make the verdict's stated confidence false."""


class InsufficientTrialsError(DpauditError):
    """Too few trials for any bound to exceed 0."""


def check_in_interval(
    name: str,
    value: Any,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float if it lies in the stated interval, else raise.

    The message follows scikit-learn's form: "The 'name' parameter must be in
    (0, 1). Got 2 instead."
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise DpauditError(
                f"The {name!r} parameter must be a real number. Got {value!r} instead."
            ) from None
    value = float(value)
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    ok = not math.isnan(value)
    ok = ok and (value > low if low_open else value >= low)
    ok = ok and (value < high if high_open else value <= high)
    if not ok:
        raise DpauditError(
            f"The {name!r} parameter must be in {left}{_fmt(low)}, {_fmt(high)}{right}. "
            f"Got {value!r} instead."
        )
    return value


def check_integer(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer in [low, high], else raise.

    ``bool`` is not an integer here, and neither is a float with an integral value (a
    count given as ``2.0`` is a mistake worth naming). Messages follow scikit-learn's
    form: "The 'name' parameter must be an integer in [1, inf). Got 0 instead."
    """
    left = "(-inf" if low is None else f"[{low}"
    right = "inf)" if high is None else f"{high}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DpauditError(
            f"The {name!r} parameter must be an integer in {left}, {right}. Got {value!r} instead."
        )
    out = int(value)
    if (low is not None and out < low) or (high is not None and out > high):
        raise DpauditError(
            f"The {name!r} parameter must be an integer in {left}, {right}. Got {out!r} instead."
        )
    return out


def check_choice(name: str, value: Any, allowed: Iterable[_Choice]) -> _Choice:
    """Return ``value`` if it is one of ``allowed``, else raise a message listing them.

    The result has the type of ``allowed``'s items, so a tuple of ``Literal`` options
    narrows an unchecked string to that ``Literal``.
    """
    options_list = list(allowed)
    if value not in options_list:
        options = ", ".join(repr(a) for a in options_list)
        raise DpauditError(
            f"The {name!r} parameter must be one of {{{options}}}. Got {value!r} instead."
        )
    return value


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"


def not_a_regular_file(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file, in words (``None`` if it can).

    Named as what it is: missing, a dangling link, a symbolic-link loop, a folder, a named
    pipe (reading one blocks), a device (``/dev/zero`` never ends), or something else.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return "is a symbolic link to nothing" if path.is_symlink() else "does not exist"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop, not a file"
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    if stat.S_ISFIFO(st.st_mode):
        return "is a named pipe (FIFO), not a file"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "is a device, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return None
