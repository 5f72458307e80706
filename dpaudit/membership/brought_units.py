"""The work units of a brought target: train its reference models and score its rows.

One unit per attack of ``[membership] attacks`` (one unit for a scores file): the unit
loads the target and ``[data]`` (:mod:`dpaudit.membership.brought`), builds the
attacker's context, and scores the audited rows through the one scoring path
(:func:`dpaudit.membership.scoring.score_rows`, the attack seeded by its position in the
list, as on dpaudit's own targets). Shadow and reference models are trained as
``[target] references`` says:

- ``"recipe"`` (default): the attacks train ``[model]`` / ``[training]`` models on
  standardised features (the target itself still receives its raw features);
- ``"clone"``: ``sklearn.base.clone`` of the target's estimator fitted on each reference
  split (Carlini et al. 2022, arXiv 2112.03570v2, §IV: shadow models trained like the
  target);
- ``"pkg.module:function"``: the user's ``function(X, y, *, seed)``.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from dpaudit.attacks import AttackContext
from dpaudit.errors import DpauditError
from dpaudit.membership.brought import (
    ByoData,
    LoadedTarget,
    check_population,
    load_byo_data,
    load_like,
    load_target,
    read_scores,
    reference_source,
)
from dpaudit.membership.scoring import resolve_attacks, score_rows, target_accuracy
from dpaudit.models import ModelSpec
from dpaudit.recipes import training_spec
from dpaudit.sections import ByoSpec

__all__ = [
    "CLONE_REFERENCES",
    "RECIPE_REFERENCES",
    "ReferenceModels",
    "byo_unit",
    "reference_trainer",
    "references_used",
]

# Salt of the seed sequence that seeds numpy's global generator while a clone fits.
_CLONE_SALT = 0xC10

#: ``[target] references`` as results.json and the report name it (``details["references"]``).
CLONE_REFERENCES = "clone of the target's estimator"
RECIPE_REFERENCES = "recipe"

ReferenceTrainer = Callable[[np.ndarray, np.ndarray, np.ndarray, int], "ReferenceModels"]


def references_used(references: str) -> str:
    """How the reference models were trained, in the words results.json records."""
    if references == "recipe":
        return RECIPE_REFERENCES
    if references == "clone":
        return CLONE_REFERENCES
    return f"training function {references}"


# ------------------------------------------------------------------ reference models


class ReferenceModels:
    """K models trained like the target, seen as one stack (``logits`` is ``(K, m, C)``).

    Each model is a :class:`~dpaudit.membership.brought.LoadedTarget`, so a reference
    model's logits come through the same path as the target's (log-probabilities for a
    scikit-learn estimator).
    """

    def __init__(self, models: list[LoadedTarget]) -> None:
        if not models:
            raise DpauditError("ReferenceModels needs at least one model.")
        self.models = models

    @property
    def num_models(self) -> int:
        return len(self.models)

    @property
    def num_features(self) -> int:
        return self.models[0].num_features

    @property
    def num_classes(self) -> int:
        return self.models[0].num_classes

    def logits(self, X: Any) -> torch.Tensor:
        return torch.cat([m.logits(X) for m in self.models])

    def __repr__(self) -> str:
        return f"ReferenceModels({self.num_models} x {self.models[0]!r})"


def reference_trainer(config: ByoSpec, target: LoadedTarget) -> ReferenceTrainer | None:
    """What trains a brought target's shadow / reference models, per ``[target] references``.

    Returns ``None`` for ``"recipe"`` (the attacks train ``[model]`` / ``[training]``
    models), else a function ``(X, y, membership, seed) -> ReferenceModels`` for
    :class:`~dpaudit.attacks.AttackContext` ``train_references``: model k is trained on
    the rows ``X[membership[k]]`` (raw ``[data]`` features, as the target saw them).

    - ``"clone"``: ``sklearn.base.clone(target.estimator)`` fitted on those rows: the same
      hyper-parameters (``get_params``), none of the target's fitted state. While clone k
      fits, numpy's global generator is seeded from ``(seed, k)`` (and restored after), so
      an estimator with ``random_state=None`` still gives units that are pure functions
      of their seed; an integer ``random_state`` is kept, as the target had it.
    - ``"pkg.module:function"``: ``function(X_k, y_k, seed=seed_k)`` returns a trained
      torch module, :class:`~dpaudit.models.ModelStack` or scikit-learn estimator.

    Raises:
        ConfigError: ``"clone"`` for a target that is not a scikit-learn estimator, or a
            training function that cannot be imported.
    """
    references = config.target.references
    source = reference_source(config, target)
    if source is None:
        return None
    if references == "clone":
        return _clone_trainer(source, target)
    return _function_trainer(source, target, references)


def _splits(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, seed: int, target: LoadedTarget
) -> Iterator[tuple[np.ndarray, np.ndarray, np.random.SeedSequence]]:
    """Each reference model's rows and its own seed sequence: the raw float32 features,
    or what ``[target] preprocess`` makes of them (float64), as the target was trained."""
    X = np.asarray(X, dtype=np.float32)
    if target.preprocess is not None:
        X = target.preprocess(X)
    y = np.asarray(y, dtype=np.int64)
    for k, rows in enumerate(np.asarray(membership, dtype=bool)):
        yield X[rows], y[rows], np.random.SeedSequence([seed, _CLONE_SALT, k])


def _clone_trainer(estimator: Any, target: LoadedTarget) -> ReferenceTrainer:
    def train(X: np.ndarray, y: np.ndarray, membership: np.ndarray, seed: int) -> ReferenceModels:
        models = []
        for X_k, y_k, ss in _splits(X, y, membership, seed, target):
            model = clone(estimator)
            # scikit-learn draws from numpy's legacy global RandomState when random_state
            # is None; seeding it (and restoring it) is the only way to fix those draws
            # without changing the clone's parameters.
            state = np.random.get_state()  # noqa: NPY002
            np.random.seed(ss.generate_state(1)[0])  # noqa: NPY002
            try:
                # The target's own recipe may stop at max_iter on purpose (as the shipped
                # example's does): its clones warn the same way, K times; not news.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    model.fit(X_k.astype(np.float64), y_k)
            finally:
                np.random.set_state(state)  # noqa: NPY002
            models.append(load_like(model, target, source="clone"))
        return ReferenceModels(models)

    return train


def _function_trainer(fn: Callable[..., Any], target: LoadedTarget, name: str) -> ReferenceTrainer:
    def train(X: np.ndarray, y: np.ndarray, membership: np.ndarray, seed: int) -> ReferenceModels:
        models = []
        for X_k, y_k, ss in _splits(X, y, membership, seed, target):
            model = fn(X_k, y_k, seed=int(ss.generate_state(1)[0]))
            models.append(load_like(model, target, source=name))
        return ReferenceModels(models)

    return train


# --------------------------------------------------------------------------- scoring


class _Standardised:
    """The target as the attacks see it: inputs standardised for the reference models.

    Attacks train reference models on standardised features (as dpaudit's own targets
    are), while the brought model expects the raw ones. Known standardised arrays are
    mapped back to their raw rows exactly; anything else is un-standardised in float64.
    """

    num_models = 1

    def __init__(self, target: LoadedTarget, data: ByoData, known: list[np.ndarray]) -> None:
        self.target = target
        self.data = data
        self.known = [(_standardise(data, raw), raw) for raw in known]

    @property
    def num_features(self) -> int:
        return self.target.num_features

    @property
    def num_classes(self) -> int:
        return self.target.num_classes

    def _raw(self, X: Any) -> np.ndarray:
        x = np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, np.float32)
        for std, raw in self.known:
            if std.shape == x.shape and np.array_equal(std, x):
                return raw
        return (x.astype(np.float64) * self.data.scale + self.data.mean).astype(np.float32)

    def logits(self, X: Any) -> torch.Tensor:
        return self.target.logits(self._raw(X))

    def probabilities(self, X: Any) -> torch.Tensor:
        return self.target.probabilities(self._raw(X))

    def losses(self, X: Any, y: Any) -> torch.Tensor:
        return self.target.losses(self._raw(X), y)


def _standardise(data: ByoData, X: np.ndarray) -> np.ndarray:
    return ((X.astype(np.float64) - data.mean) / data.scale).astype(np.float32)


def byo_unit(config: ByoSpec, unit: str) -> dict[str, np.ndarray]:
    """Score the audited rows with one attack (a pure function of config and unit).

    ``unit`` is ``"byo-<digest>-<attack>"`` (``"byo-<digest>-scores"`` for a scores file).
    """
    name = unit.split("-", 2)[2]
    if name == "scores":
        return _scores_unit(config)
    data = load_byo_data(config)
    ds = data.dataset
    target, notes = load_target(config, num_features=ds.num_features, num_classes=ds.num_classes)
    train_references = reference_trainer(config, target)
    if train_references is not None:
        # Models trained like the target take its raw features: no standardisation.
        data = dataclasses.replace(
            data, mean=np.zeros_like(data.mean), scale=np.ones_like(data.scale)
        )
    check_population(config, data, (name,))
    X_raw, y = ds.X[data.audited], ds.y[data.audited]
    context = _attack_context(config, data, target, train_references, X_raw)
    attack = resolve_attacks(
        [name],
        num_reference_models=config.reference_models,
        num_shadow_models=config.shadow_models,
    )
    (scored,) = score_rows(
        context,
        _standardise(data, X_raw),
        y,
        attack,
        seed=config.seed,
        names=[name],
        positions=[list(config.attacks).index(name)],
    )
    info = {
        "attack": name,
        "options": scored.options,
        "target": target.description,
        "warnings": notes,
        "accuracy": target_accuracy(
            target, X_raw, y, data.membership, held_out=_rows(ds, data.held_out)
        ),
        "references": references_used(config.target.references),
    }
    if data.split is not None:
        info["population_split"] = data.split
    return {
        "scores": scored.scores,
        "membership": data.membership,
        "info": np.array(json.dumps(info)),
    }


def _rows(ds: Any, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    return None if rows is None else (ds.X[rows], ds.y[rows])


def _scores_unit(config: ByoSpec) -> dict[str, np.ndarray]:
    """A scores file's unit: the loss attack on the losses it holds."""
    losses, membership, source = read_scores(config)
    return {
        "scores": -losses,  # the loss attack: smaller loss, more likely a member
        "membership": membership,
        "info": np.array(json.dumps({"attack": "loss", "options": {}, "source": source})),
    }


def _attack_context(
    config: ByoSpec,
    data: ByoData,
    target: LoadedTarget,
    train_references: ReferenceTrainer | None,
    X_raw: np.ndarray,
) -> AttackContext:
    """The attacker's knowledge of a brought target: the model behind its standardised
    view, the reference recipe (or trainer), and the rows of unknown membership."""
    ds = data.dataset
    m = config.model
    members = int(data.membership.sum())
    return AttackContext(
        # duck-typed: attacks read only logits / num_features / num_classes / num_models
        target=_Standardised(target, data, [X_raw]),  # type: ignore[arg-type]
        model=ModelSpec(kind=m.kind, hidden=tuple(m.hidden), activation=m.activation),
        # the [training] recipe for reference models, DP noise calibrated to the target's size
        training=training_spec(config.training, members=members),
        target_train_size=members,
        population_X=_standardise(data, ds.X[data.population]),
        population_y=ds.y[data.population],
        num_classes=ds.num_classes,
        device=config.device,
        train_references=train_references,
    )
