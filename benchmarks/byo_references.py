"""A brought scikit-learn model: reference models cloned from it against the TOML recipe.

Run:  .venv/bin/python benchmarks/byo_references.py [--seeds 5] [--reference-models 16]
      [--json FILE]

For each seed s (s = 0, 1, ...), the setting of ``audits/byo-sklearn.toml``:

1. ``scripts/make_byo_sklearn.py --seed s`` makes the target: 1,000 audited rows of
   ``sklearn:digits``, each a member by an independent fair coin drawn with seed s, and a
   standardise-then-MLP scikit-learn pipeline (64 hidden units, 100 epochs of SGD with
   momentum, ``random_state = s``) fitted on the members, saved with skops.
2. dpaudit's brought-target LiRA unit (``dpaudit.membership.brought_units.byo_unit``, the
   audit file with ``[audit] seed = s``, so s also seeds the reference splits) with
   ``[target] references = "clone"`` and, for contrast, ``references = "recipe"`` (torch
   MLPs of ``[model]`` / ``[training]``). K reference models each; dpaudit's ``"lira"``
   attack (online; variance "auto", i.e. one global variance per hypothesis below 64
   models).
3. A LiRA written here by hand: K clones of the loaded estimator
   (``sklearn.base.clone``), clone k fitted on an independent uniformly random half of
   the audited rows (its own generator, seeded by s), the logit-scaled confidence
   φ = log p_y − log Σ_{j≠y} p_j (= log p_y − log(1 − p_y)), and the online test
   log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²) with a mean and variance per example
   and hypothesis
   (Carlini, Chien, Nasr, Song, Terzis, Tramèr 2022, "Membership Inference Attacks From
   First Principles", arXiv 2112.03570v2, §IV, Algorithm 1, the online attack; an example
   with fewer than two models on a side takes that side's variance pooled over examples).
   The same scores with one pooled variance per hypothesis (the paper's fixed-variance
   variant for few shadow models) are shown too ("hand, global").

Every method's scores are turned into the same metrics here (scikit-learn's ROC): TPR at
the largest achieved FPR ≤ 1 % and ≤ 0.1 %, and the AUC. Printed: per seed, then the
median and [min, max] over seeds; the goal is that dpaudit-clone's median TPR at 1 % FPR
lies within [min, max] of the hand LiRA's seeds. CPU seconds (``time.process_time`` of this
process; one torch / BLAS thread) and wall seconds per method, and the load average.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread: CPU seconds comparable across runs

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "audits" / "byo-sklearn.toml"
FPRS = (0.01, 0.001)
METHODS = ("dpaudit-clone", "dpaudit-recipe", "hand", "hand, global")


# ----------------------------------------------------------------------------- metrics


def metrics(scores: np.ndarray, member: np.ndarray) -> dict[str, float]:
    """AUC and TPR at the largest achieved FPR ≤ each target (scikit-learn's ROC)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    fpr, tpr, _ = roc_curve(member.astype(int), scores)
    out = {"auc": float(roc_auc_score(member.astype(int), scores))}
    for target in FPRS:
        out[f"tpr@{target:g}"] = float(tpr[fpr <= target].max())
    return out


# ----------------------------------------------------------------------- the hand LiRA


def _phi(estimator: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log p_y − log Σ_{j≠y} p_j from predict_proba.

    The other classes' probabilities are summed directly: 1 − p_y would cancel to 0 for a
    confident model (p_y within 1e-16 of 1). 1e-300 keeps an exact 0 finite.
    """
    p = estimator.predict_proba(X.astype(np.float64))
    rows = np.arange(y.size)
    p_y = p[rows, y]
    others = p.copy()
    others[rows, y] = 0.0
    return np.log(p_y + 1e-300) - np.log(others.sum(axis=1) + 1e-300)


def _gaussian_logpdf(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2.0 * np.pi)


def _side(phi: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-example mean and std (ddof 1) over the models in ``mask``, and the pooled std."""
    n = mask.sum(axis=0)
    mean = (phi * mask).sum(axis=0) / np.maximum(n, 1)
    ss = (((phi - mean) ** 2) * mask).sum(axis=0)
    pooled = np.sqrt(ss.sum() / np.maximum(n - 1, 0).sum())
    sd = np.where(n >= 2, np.sqrt(ss / np.maximum(n - 1, 1)), pooled)
    return mean, np.maximum(sd, 1e-6), np.full_like(mean, pooled)


def hand_lira(
    estimator: Any, X: np.ndarray, y: np.ndarray, *, num_models: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Online LiRA with clones of ``estimator`` on random halves: (per-example, global)."""
    import warnings

    from sklearn.base import clone
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng([seed, 0x4A4D])
    m = y.size
    inside = np.zeros((num_models, m), dtype=bool)
    phi = np.empty((num_models, m))
    for k in range(num_models):
        inside[k, rng.permutation(m)[: m // 2]] = True
        model = clone(estimator)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X[inside[k]].astype(np.float64), y[inside[k]])
        phi[k] = _phi(model, X, y)
    target = _phi(estimator, X, y)
    mu_in, sd_in, pooled_in = _side(phi, inside)
    mu_out, sd_out, pooled_out = _side(phi, ~inside)
    per_example = _gaussian_logpdf(target, mu_in, sd_in) - _gaussian_logpdf(target, mu_out, sd_out)
    pooled = _gaussian_logpdf(target, mu_in, pooled_in) - _gaussian_logpdf(
        target, mu_out, pooled_out
    )
    return per_example, pooled


# ------------------------------------------------------------------------------- a seed


def _audit_file(folder: Path, seed: int, references: str, k: int) -> Path:
    text = AUDIT.read_text()
    text = text.replace('path = "byo-sklearn/model.skops"', f'path = "{folder}/model.skops"')
    text = text.replace(
        'membership = "byo-sklearn/membership.csv"', f'membership = "{folder}/membership.csv"'
    )
    text = text.replace("seed = 0", f"seed = {seed}", 1)
    text = text.replace('references = "clone"', f'references = "{references}"')
    text = text.replace("reference_models = 16", f"reference_models = {k}")
    if f'references = "{references}"' not in text or f"seed = {seed}" not in text:
        raise SystemExit("audits/byo-sklearn.toml changed shape; update this benchmark")
    out = folder / f"audit-{references}.toml"
    out.write_text(text)
    return out


def _timed(fn: Any) -> tuple[Any, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.process_time() - c0, time.perf_counter() - w0


def run_seed(seed: int, k: int) -> dict[str, Any]:
    from dpaudit.audit import run_context
    from dpaudit.config import load_config
    from dpaudit.membership.brought import load_byo_data, load_target
    from dpaudit.membership.brought_units import byo_unit
    from dpaudit.membership.kind import byo_spec, byo_units

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_byo_sklearn.py"), "--out", tmp,
             "--seed", str(seed)],
            check=True, capture_output=True,
        )  # fmt: skip
        row: dict[str, Any] = {"seed": seed}
        member = None
        # Warm-up, not timed: the first load imports skops and scikit-learn's MLP.
        warm = load_config(_audit_file(folder, seed, "clone", k))
        warm_spec = byo_spec(warm.section("membership"), run_context(warm))
        ds0 = load_byo_data(warm_spec).dataset
        load_target(warm_spec, num_features=ds0.num_features, num_classes=ds0.num_classes)
        for references in ("clone", "recipe"):
            config = load_config(_audit_file(folder, seed, references, k))
            spec = byo_spec(config.section("membership"), run_context(config))
            unit = next(u for u in byo_units(spec) if u.endswith("-lira"))
            out, cpu, wall = _timed(lambda s=spec, u=unit: byo_unit(s, u))
            member = np.asarray(out["membership"], dtype=bool)
            row[f"dpaudit-{references}"] = {
                **metrics(out["scores"], member),
                "cpu": cpu,
                "wall": wall,
            }
        data = load_byo_data(spec)
        ds = data.dataset
        target, _ = load_target(spec, num_features=ds.num_features, num_classes=ds.num_classes)
        X, y = ds.X[data.audited], ds.y[data.audited]
        (per_example, pooled), cpu, wall = _timed(
            lambda: hand_lira(target.estimator, X, y, num_models=k, seed=seed)
        )
        assert member is not None
        row["hand"] = {**metrics(per_example, member), "cpu": cpu, "wall": wall}
        row["hand, global"] = {**metrics(pooled, member), "cpu": 0.0, "wall": 0.0}
        row["members"] = int(member.sum())
        return row


# ------------------------------------------------------------------------------ report


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def summarise(rows: list[dict[str, Any]]) -> str:
    keys = ("tpr@0.01", "tpr@0.001", "auc")
    lines = [
        "| references | TPR at 1 % FPR | TPR at 0.1 % FPR | AUC | CPU s (median) | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for method in METHODS:
        cells = [_cell([r[method][key] for r in rows]) for key in keys]
        cpu = statistics.median(r[method]["cpu"] for r in rows)
        wall = statistics.median(r[method]["wall"] for r in rows)
        timing = ("(with hand)", "") if method == "hand, global" else (f"{cpu:.1f}", f"{wall:.1f}")
        lines.append(f"| {method} | {' | '.join(cells)} | {timing[0]} | {timing[1]} |")
    clone = statistics.median(r["dpaudit-clone"]["tpr@0.01"] for r in rows)
    lines.append("")
    for method in ("hand", "hand, global"):
        hand = [r[method]["tpr@0.01"] for r in rows]
        where = (
            "within"
            if min(hand) <= clone <= max(hand)
            else ("ABOVE" if clone > max(hand) else "BELOW")
        )
        lines.append(
            f"dpaudit-clone's median TPR at 1 % FPR ({clone:.3f}) against the {method} "
            f"LiRA's seed range [{min(hand):.3f}, {max(hand):.3f}]: {where}."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--reference-models", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    c0, w0 = time.process_time(), time.perf_counter()
    rows = []
    for seed in range(args.seeds):
        row = run_seed(seed, args.reference_models)
        rows.append(row)
        print(
            f"seed {seed} ({row['members']} members): "
            + "; ".join(
                f"{m} TPR@1% {row[m]['tpr@0.01']:.3f} TPR@0.1% {row[m]['tpr@0.001']:.3f} "
                f"AUC {row[m]['auc']:.3f}"
                for m in METHODS
            ),
            flush=True,
        )
    print()
    print(f"K = {args.reference_models} reference models, {args.seeds} seeds")
    print(summarise(rows))
    load = os.getloadavg()
    print(
        f"\nTotal: CPU {time.process_time() - c0:.1f} s, wall {time.perf_counter() - w0:.1f} s "
        f"(target fits run in a subprocess, not counted); load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
