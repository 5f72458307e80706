"""dpaudit: audit differential privacy in machine learning.

The public API is listed in DESIGN.md §4; names re-exported here are a contract.
"""

from __future__ import annotations

__version__ = "0.1.0"

from dpaudit import accounting, theory
from dpaudit.audit import run_audit
from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    epsilon_from_counts,
    epsilon_lower_bound,
    mu_from_counts,
    mu_lower_bound,
    one_run_epsilon_lower_bound,
)
from dpaudit.config import AuditConfig, load_config
from dpaudit.errors import ConfigError, DataError, DpauditError, InsufficientTrialsError
from dpaudit.results import AuditResult
from dpaudit.stats import ConfidenceInterval, clopper_pearson
from dpaudit.tradeoff import MembershipMetrics, TradeoffCurve, membership_metrics

__all__ = [
    "AuditConfig",
    "AuditResult",
    "ConfidenceInterval",
    "ConfigError",
    "DataError",
    "DpauditError",
    "EpsilonBound",
    "InsufficientTrialsError",
    "MembershipMetrics",
    "MuBound",
    "TradeoffCurve",
    "__version__",
    "accounting",
    "clopper_pearson",
    "epsilon_from_counts",
    "epsilon_lower_bound",
    "load_config",
    "membership_metrics",
    "mu_from_counts",
    "mu_lower_bound",
    "one_run_epsilon_lower_bound",
    "run_audit",
    "theory",
]
