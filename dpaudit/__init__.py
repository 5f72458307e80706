"""dpaudit: audit differential privacy in machine learning.

The public API is listed in ``docs/design.md`` ("Python API"); names re-exported here are
a contract. They are imported on first use (PEP 562), so ``import dpaudit.bounds`` or
loading an audit file does not pay for torch and dp-accounting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports
from dpaudit._version import __version__

#: Public name → the module that defines it (``None``: the name is that module).
_EXPORTS: dict[str, str] = {
    "accounting": "dpaudit.accounting",
    "theory": "dpaudit.theory",
    "run_audit": "dpaudit.audit",
    "audit_model": "dpaudit.notebook",
    "EpsilonBound": "dpaudit.bounds",
    "MuBound": "dpaudit.bounds",
    "epsilon_from_counts": "dpaudit.bounds",
    "epsilon_lower_bound": "dpaudit.bounds",
    "mu_from_counts": "dpaudit.bounds",
    "mu_lower_bound": "dpaudit.bounds",
    "one_run_epsilon_lower_bound": "dpaudit.bounds",
    "one_run_fdp_test": "dpaudit.bounds.fdp_one_run",
    "one_run_mu_lower_bound": "dpaudit.bounds.fdp_one_run",
    "AuditConfig": "dpaudit.config",
    "load_config": "dpaudit.config",
    "Dataset": "dpaudit.data",
    "load_dataset": "dpaudit.data",
    "split_dataset": "dpaudit.data",
    "ConfigError": "dpaudit.errors",
    "DataError": "dpaudit.errors",
    "DpauditError": "dpaudit.errors",
    "InsufficientTrialsError": "dpaudit.errors",
    "AttributeAuditResult": "dpaudit.membership",
    "MembershipAuditResult": "dpaudit.membership",
    "audit_attribute": "dpaudit.membership",
    "audit_membership": "dpaudit.membership",
    "prepare_target": "dpaudit.membership",
    "ModelSpec": "dpaudit.models",
    "ModelStack": "dpaudit.models",
    "AuditResult": "dpaudit.results",
    "ConfidenceInterval": "dpaudit.stats",
    "clopper_pearson": "dpaudit.stats",
    "MembershipMetrics": "dpaudit.tradeoff",
    "TradeoffCurve": "dpaudit.tradeoff",
    "membership_metrics": "dpaudit.tradeoff",
    "DPConfig": "dpaudit.training",
    "TrainingSpec": "dpaudit.training",
    "TrainResult": "dpaudit.training",
    "train_many": "dpaudit.training",
}
_MODULES = ("accounting", "theory")

__all__ = ["__version__", *sorted(_EXPORTS)]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, modules=_MODULES)


if TYPE_CHECKING:  # the names as static type checkers should see them
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
    from dpaudit.bounds.fdp_one_run import one_run_fdp_test, one_run_mu_lower_bound
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
    from dpaudit.notebook import audit_model
    from dpaudit.results import AuditResult
    from dpaudit.stats import ConfidenceInterval, clopper_pearson
    from dpaudit.tradeoff import MembershipMetrics, TradeoffCurve, membership_metrics
    from dpaudit.training import DPConfig, TrainingSpec, TrainResult, train_many
