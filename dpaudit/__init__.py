"""dpaudit: audit differential privacy in machine learning.

The public API is listed in DESIGN.md §4; names re-exported here are a contract.
"""

from __future__ import annotations

from dpaudit.errors import ConfigError, DataError, DpauditError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataError",
    "DpauditError",
    "__version__",
]
