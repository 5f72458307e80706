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
from dpaudit.data import Dataset, load_dataset, split_dataset
from dpaudit.errors import ConfigError, DataError, DpauditError, InsufficientTrialsError
from dpaudit.membership import (
    AttributeAuditResult,
    MembershipAuditResult,
    audit_attribute,
    audit_membership,
    prepare_target,
)
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.results import AuditResult
from dpaudit.stats import ConfidenceInterval, clopper_pearson
from dpaudit.tradeoff import MembershipMetrics, TradeoffCurve, membership_metrics
from dpaudit.training import DPConfig, TrainingSpec, TrainResult, train_many

__all__ = [
    "AttributeAuditResult",
    "AuditConfig",
    "AuditResult",
    "ConfidenceInterval",
    "ConfigError",
    "DPConfig",
    "DataError",
    "Dataset",
    "DpauditError",
    "EpsilonBound",
    "InsufficientTrialsError",
    "MembershipAuditResult",
    "MembershipMetrics",
    "ModelSpec",
    "ModelStack",
    "MuBound",
    "TradeoffCurve",
    "TrainResult",
    "TrainingSpec",
    "__version__",
    "accounting",
    "audit_attribute",
    "audit_membership",
    "clopper_pearson",
    "epsilon_from_counts",
    "epsilon_lower_bound",
    "load_config",
    "load_dataset",
    "membership_metrics",
    "mu_from_counts",
    "mu_lower_bound",
    "one_run_epsilon_lower_bound",
    "prepare_target",
    "run_audit",
    "split_dataset",
    "theory",
    "train_many",
]
