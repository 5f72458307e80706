"""Make the model that audits/byo-sklearn.toml audits: a scikit-learn MLP saved with skops.

It plays the user who brings their own model. From scikit-learn's digits (the rows as
dpaudit's ``sklearn:digits`` loads them), it draws 1,000 audited rows, puts each one into
the training set by an independent fair coin (so the one-run ε lower bound is rigorous:
``membership_by_coin = true``), trains a standardise-then-MLP pipeline on the winners, and
writes, next to the audit file:

- ``byo-sklearn/model.skops``: the fitted pipeline (skops: no pickle; its one type skops
  does not trust by default, scikit-learn's SGD optimizer state, is listed in the audit
  file's ``trusted_types``);
- ``byo-sklearn/membership.csv``: columns ``row`` (0-based row of ``sklearn:digits``) and
  ``member`` (1 / 0); the 797 unlisted rows are the attacker's own population.

Usage::

    python scripts/make_byo_sklearn.py [--out audits/byo-sklearn] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

AUDITED = 1000


def main() -> None:
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from skops.io import dump

    from dpaudit.data import load_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    parser.add_argument("--out", type=Path, default=root / "audits" / "byo-sklearn")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    data = load_dataset("sklearn:digits")
    rng = np.random.default_rng(args.seed)
    audited = np.sort(rng.choice(data.num_rows, size=AUDITED, replace=False))
    member = rng.random(AUDITED) < 0.5  # one independent fair coin per audited row
    train = audited[member]
    model = make_pipeline(
        StandardScaler(),
        MLPClassifier(
            hidden_layer_sizes=(64,),
            solver="sgd",  # plain SGD with momentum: the recipe [training] mirrors
            learning_rate_init=0.05,
            momentum=0.9,
            nesterovs_momentum=False,
            batch_size=32,
            alpha=0.0,
            max_iter=100,
            n_iter_no_change=100,  # all 100 epochs, no early stop
            random_state=args.seed,
        ),
    )
    model.fit(data.X[train].astype(np.float64), data.y[train])

    args.out.mkdir(parents=True, exist_ok=True)
    dump(model, args.out / "model.skops")
    rows = "\n".join(f"{r},{int(m)}" for r, m in zip(audited, member, strict=True))
    (args.out / "membership.csv").write_text(f"row,member\n{rows}\n")
    others = np.setdiff1d(np.arange(data.num_rows), train)
    print(
        f"wrote {args.out}/model.skops and membership.csv: {train.size} members, "
        f"{AUDITED - train.size} audited non-members; train accuracy "
        f"{model.score(data.X[train], data.y[train]):.3f}, other rows "
        f"{model.score(data.X[others], data.y[others]):.3f}"
    )


if __name__ == "__main__":
    main()
