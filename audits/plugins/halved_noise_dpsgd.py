"""A planted bug for `audits/dpsgd-sequential-violation.toml`: DP-SGD that adds less
noise than its records state.

The trainer runs dpaudit's own Poisson DP-SGD with the noise multiplier σ/k (k is the
trainer option ``noise_divisor``, 2 by default), so the white-box canary scores are the
Neyman–Pearson scores of what ran, and returns records that say σ: the accountant's ε and
μ for σ are the claim the audit refutes.
"""

from __future__ import annotations

from dataclasses import replace

from dpaudit.trainers import dpsgd_trainer


def halved_noise(X, y, membership, *, seed, canary, settings):
    """DP-SGD run at σ/k, recorded at σ (the bug the audit is meant to find)."""
    dp = settings.training.dp
    divisor = float(settings.options.get("noise_divisor", 2.0))
    ran = replace(settings.training, dp=replace(dp, noise_multiplier=dp.noise_multiplier / divisor))
    out = dpsgd_trainer(
        X, y, membership, seed=seed, canary=canary, settings=replace(settings, training=ran)
    )
    stated = tuple(replace(r, noise_multiplier=dp.noise_multiplier) for r in out.records)
    # The grey-box observations are dropped: they would show the reduced noise directly
    # (greybox_noise); this audit shows the canary bounds finding it sequentially.
    return {"scores": out.scores, "records": stated}
