"""The bug zoo's DP-SGD trainers: what ran is not what the accountant was told.

User trainers for ``[dpsgd] trainer = "zoo_trainers:function"`` (protocol of
:mod:`dpaudit.trainers`). Each runs dpaudit's engine (Poisson-subsampled DP-SGD as
Opacus runs it) and returns the white-box canary scores of what RAN, and records that
describe what the trainer BELIEVES it ran: the configured σ and q. The accountant reads
those records, so a trainer that runs something else is caught only if the audit's lower
bound exceeds the upper bound computed from the records.

- :func:`dpsgd_correct` (fixed): runs the configuration and reports it.
- :func:`dpsgd_half_noise` (buggy): adds noise σ/2 (e.g. a noise multiplier divided
  by two when it was meant to be split between two calls), reports σ.
- :func:`dpsgd_wrong_rate` (buggy): samples at rate 5·q (batches five times the
  configured size, as when a data loader ignores the privacy engine's sampler) over as
  many steps, reports q.
- :func:`dpgd_per_layer` (fixed) and :func:`dpgd_per_layer_one_group_noise` (buggy):
  full-batch DP-GD that clips every parameter tensor to C on its own; the fixed one adds
  noise for the whole norm C·√G of G tensors, the buggy one for one tensor (σ·C). The
  one-coordinate Dirac canary lies in one tensor and cannot see the bug; the default
  every-group canary of a user trainer can.

The white-box score is the sum over steps of the mixture log-likelihood ratio of the
privatised gradient along the Dirac canary (:func:`dpaudit.trainers.canary_observer`),
computed with what ran: any function of the transcript gives a valid audit, and this
one is the most powerful against what ran.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from dpaudit.records import DPSGDRecord
from dpaudit.trainers import TrainerOutput, canary_observer, mixture_log_likelihood_ratio
from dpaudit.training import GradientCanary, train_many
from dpaudit.training.specs import TrainingSpec

#: The wrong-rate bug samples at this multiple of the configured rate.
RATE_FACTOR = 5


def _run(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: Any,
    settings: Any,
    training: TrainingSpec,
) -> tuple[np.ndarray, tuple[Any, ...]]:
    """Train with ``training`` (what runs); the canary's white-box scores and records."""
    observer = canary_observer(
        membership,
        training,
        score=canary.score,
        direction=canary.direction,
        model_offset=settings.model_offset,
    )
    result = train_many(
        X,
        y,
        membership,
        model=settings.model,
        training=training,
        seed=seed,
        num_classes=settings.num_classes,
        model_offset=settings.model_offset,
        step_observer=observer,
        gradient_canary=GradientCanary(canary.direction, canary.included),
    )
    return observer.scores(canary.score), tuple(result.records)


def dpsgd_correct(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """FIXED: runs the configured DP-SGD and reports the engine's own records."""
    scores, records = _run(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=settings.training
    )
    return TrainerOutput(scores=scores, records=records)


def dpsgd_half_noise(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """BUGGY: runs noise multiplier σ/2 and reports σ."""
    dp = settings.training.dp
    ran = replace(settings.training, dp=replace(dp, noise_multiplier=dp.noise_multiplier / 2.0))
    scores, records = _run(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=ran
    )
    told = tuple(replace(r, noise_multiplier=dp.noise_multiplier) for r in records)
    return TrainerOutput(scores=scores, records=told)


def dpsgd_wrong_rate(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """BUGGY: samples at rate RATE_FACTOR·q for as many steps, and reports q.

    The engine takes ``n // batch_size`` steps per epoch, so RATE_FACTOR times the batch
    size over RATE_FACTOR times the epochs runs the same number of steps whenever the
    batch size divides the members (the shipped audit: 100 rows, batch 10 → 50).
    """
    cfg = settings.training
    ran = replace(cfg, batch_size=cfg.batch_size * RATE_FACTOR, epochs=cfg.epochs * RATE_FACTOR)
    scores, records = _run(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=ran
    )
    told = tuple(replace(r, sampling_rate=r.sampling_rate / RATE_FACTOR) for r in records)
    return TrainerOutput(scores=scores, records=told)


# ------------------------------------------------------------------ per-layer clipping


def _per_layer_dpgd(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: Any,
    settings: Any,
    noise_for_groups: bool,
) -> TrainerOutput:
    """Full-batch DP-GD of a ReLU MLP (or logistic regression) that clips per tensor.

    Every parameter tensor (each layer's weight, each layer's bias: G of them) of every
    example's gradient is clipped to C on its own, so a whole example moves the clipped
    sum by up to C·√G. ``noise_for_groups`` adds noise σ·C·√G (calibrated for that total
    norm) and records clipping norm C·√G; otherwise noise σ·C, calibrated for ONE tensor,
    and records C: the bug. The canary is one more example whose gradient is a large
    multiple of ``canary.direction``, clipped per tensor like every example, in every step
    (full batch). The white-box score is, per step, the noisy clipped sum minus the real
    examples' clipped sum (which the auditor computes from the previous parameters and
    the public rows: full batch samples nothing), projected on the direction, i.e.
    canary + noise exactly on every tensor, then the mixture log-likelihood ratio with
    the recorded σ and C (at q = 1 an increasing affine map of the plain sum).
    """
    if settings.model.activation != "relu":
        raise ValueError("the per-layer zoo trainer is written for ReLU MLPs")
    dp = settings.training.dp
    cfg = settings.training
    x = torch.as_tensor(np.asarray(X, dtype=np.float64))
    labels = torch.as_tensor(np.asarray(y, dtype=np.int64))
    k_models = membership.shape[0]
    widths = [x.shape[1], *settings.model.hidden_widths, settings.num_classes]
    shapes = [(widths[i + 1], widths[i]) for i in range(len(widths) - 1)]
    groups = 2 * len(shapes)
    clip = float(dp.clipping_norm)
    sigma = float(dp.noise_multiplier)
    noise_std = sigma * clip * (np.sqrt(groups) if noise_for_groups else 1.0)
    # each model's own init and noise, from (seed, global model index) alone
    rngs = [np.random.default_rng([seed, settings.model_offset + k, 77]) for k in range(k_models)]
    params: list[torch.Tensor] = []
    for out, inp in shapes:
        bound = 1.0 / np.sqrt(inp)
        params.append(
            torch.as_tensor(np.stack([r.uniform(-bound, bound, (out, inp)) for r in rngs]))
        )
        params.append(torch.as_tensor(np.stack([r.uniform(-bound, bound, out) for r in rngs])))
    u = np.asarray(canary.direction, dtype=np.float64)
    u = u / np.linalg.norm(u)
    parts, start = [], 0
    for p in params:
        size = int(np.prod(p.shape[1:]))
        parts.append(torch.as_tensor(u[start : start + size].reshape(p.shape[1:])))
        start += size
    # the canary's gradient, a large multiple of u, clipped per tensor: C·u_g/‖u_g‖
    clipped_canary = [
        part * (clip / float(part.norm())) if float(part.norm()) > 0 else part for part in parts
    ]
    inc = torch.as_tensor(np.asarray(canary.included, dtype=np.float64))
    mask = torch.as_tensor(membership.astype(np.float64))
    sizes = mask.sum(dim=1)
    onehot = torch.nn.functional.one_hot(labels, settings.num_classes).to(torch.float64)
    steps = int(cfg.epochs)
    llr, total = np.zeros(k_models), np.zeros(k_models)
    told_clip = clip * (np.sqrt(groups) if noise_for_groups else 1.0)
    for _ in range(steps):
        acts = [x.expand(k_models, *x.shape)]
        pre = []
        for i in range(len(shapes)):
            z = torch.einsum("kni,koi->kno", acts[-1], params[2 * i]) + params[2 * i + 1][:, None]
            pre.append(z)
            acts.append(torch.relu(z) if i < len(shapes) - 1 else z)
        delta = torch.softmax(acts[-1], dim=2) - onehot  # (K, n, classes)
        sums: list[torch.Tensor] = [torch.empty(0)] * len(params)
        for i in reversed(range(len(shapes))):
            a = acts[i]
            fw = torch.clamp(clip / (delta.norm(dim=2) * a.norm(dim=2) + 1e-6), max=1.0) * mask
            fb = torch.clamp(clip / (delta.norm(dim=2) + 1e-6), max=1.0) * mask
            sums[2 * i] = torch.einsum("kno,kni->koi", delta * fw[..., None], a)
            sums[2 * i + 1] = (delta * fb[..., None]).sum(dim=1)
            if i:
                delta = (delta @ params[2 * i]) * (pre[i - 1] > 0)
        x_t = torch.zeros(k_models, dtype=torch.float64)
        for j, (s, c, part) in enumerate(zip(sums, clipped_canary, parts, strict=True)):
            shape = s.shape[1:]
            z = torch.as_tensor(np.stack([r.standard_normal(shape) for r in rngs])) * noise_std
            extra = inc.reshape(-1, *([1] * len(shape))) * c + z
            x_t += (extra * part).reshape(k_models, -1).sum(dim=1)
            params[j] = params[j] - cfg.learning_rate * (s + extra) / sizes.reshape(
                -1, *([1] * len(shape))
            )
        total += x_t.numpy()
        llr += mixture_log_likelihood_ratio(
            x_t.numpy(), sampling_rate=1.0, noise_multiplier=sigma, clipping_norm=told_clip
        )
    scores = llr if canary.score == "likelihood-ratio" else total
    records = tuple(
        DPSGDRecord(
            noise_multiplier=sigma,
            sampling_rate=1.0,
            steps=steps,
            clipping_norm=told_clip,
            sampling="full-batch",
            dataset_size=int(sizes[k]),
        )
        for k in range(k_models)
    )
    return TrainerOutput(scores=scores, records=records)


def dpgd_per_layer(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """FIXED: clips each tensor to C, noise σ·C·√G for the whole norm C·√G, records C·√G."""
    return _per_layer_dpgd(
        X, y, membership, seed=seed, canary=canary, settings=settings, noise_for_groups=True
    )


def dpgd_per_layer_one_group_noise(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """BUGGY: clips each tensor to C, but adds noise σ·C (made for one tensor), records C."""
    return _per_layer_dpgd(
        X, y, membership, seed=seed, canary=canary, settings=settings, noise_for_groups=False
    )
