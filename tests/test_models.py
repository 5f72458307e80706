"""Stacked logistic / MLP models against plain torch modules as the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpaudit.errors import DataError, DpauditError
from dpaudit.models import ModelSpec, ModelStack, derive_generator

SPECS = [
    ModelSpec(kind="logistic"),
    ModelSpec(hidden=(8,), activation="relu"),
    ModelSpec(hidden=(8, 4), activation="tanh"),
    ModelSpec(hidden=(5,), activation="sigmoid"),
    ModelSpec(hidden=(5,), activation="gelu"),
]


def _stack(spec=SPECS[1], k=4, d=6, c=3, seed=0, dtype=torch.float64):
    return ModelStack.init(
        spec, num_models=k, num_features=d, num_classes=c, seed=seed, dtype=dtype
    )


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.kind}-{s.hidden_widths}-{s.activation}")
def test_logits_losses_probabilities_match_torch_modules(spec):
    stack = _stack(spec)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(9, 6))
    y = rng.integers(0, 3, size=9)
    logits = stack.logits(X)
    assert logits.shape == (4, 9, 3)
    for k in range(4):
        module = stack.to_module(k)
        reference = module(torch.as_tensor(X))
        torch.testing.assert_close(logits[k], reference, atol=1e-12, rtol=0)
        torch.testing.assert_close(
            stack.losses(X, y)[k],
            F.cross_entropy(reference, torch.as_tensor(y), reduction="none"),
            atol=1e-12,
            rtol=0,
        )
    probabilities = stack.probabilities(X)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(4, 9, dtype=torch.float64))
    # Per-model inputs give the same as the shared ones.
    per_model = torch.as_tensor(X).expand(4, -1, -1)
    torch.testing.assert_close(stack.logits(per_model), logits)


def test_per_model_inputs_and_labels():
    stack = _stack()
    rng = np.random.default_rng(2)
    X = rng.normal(size=(4, 5, 6))
    y = rng.integers(0, 3, size=(4, 5))
    losses = stack.losses(X, y)
    for k in range(4):
        torch.testing.assert_close(losses[k], stack.select(k).losses(X[k], y[k])[0])
    acc = stack.accuracy(X[0], y[0])
    expected = (stack.predict(X[0]) == torch.as_tensor(y[0])).double().mean(1)
    torch.testing.assert_close(acc, expected)


def test_init_follows_torch_default_bounds_and_is_seeded():
    stack = _stack(ModelSpec(hidden=(200,)), k=3, d=50, c=4, seed=3)
    for w, b in zip(stack.weights, stack.biases, strict=True):
        bound = 1 / math.sqrt(w.shape[2])
        assert float(w.abs().max()) <= bound
        assert float(b.abs().max()) <= bound
        # U(-a, a) has variance a²/3; with kurtosis 9/5 the sample variance of 30,000 draws
        # has relative standard error sqrt(0.8 / 30,000) ≈ 0.5 %, so 5 % is 10 of them.
        if w[0].numel() >= 10_000:
            assert abs(float(w.var()) / (bound**2 / 3) - 1) < 0.05
    again = _stack(ModelSpec(hidden=(200,)), k=3, d=50, c=4, seed=3)
    torch.testing.assert_close(stack.flat_parameters(), again.flat_parameters(), atol=0, rtol=0)
    other = _stack(ModelSpec(hidden=(200,)), k=3, d=50, c=4, seed=4)
    assert not torch.equal(stack.flat_parameters(), other.flat_parameters())


def test_init_of_a_model_does_not_depend_on_its_neighbours():
    full = _stack(k=6, seed=9)
    part = ModelStack.init(
        SPECS[1],
        num_models=2,
        num_features=6,
        num_classes=3,
        seed=9,
        dtype=torch.float64,
        model_offset=3,
    )
    torch.testing.assert_close(part.flat_parameters(), full.select([3, 4]).flat_parameters())


def test_round_trips():
    stack = _stack(SPECS[2])
    state = stack.state_dict()
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]
    again = ModelStack.from_state_dict(SPECS[2], state)
    torch.testing.assert_close(again.flat_parameters(), stack.flat_parameters())
    flat = ModelStack.from_flat(SPECS[2], stack.flat_parameters(), num_features=6, num_classes=3)
    torch.testing.assert_close(flat.logits(np.ones((2, 6))), stack.logits(np.ones((2, 6))))
    assert stack.num_parameters == 6 * 8 + 8 + 8 * 4 + 4 + 4 * 3 + 3
    assert stack.select(slice(1, 3)).num_models == 2
    both = ModelStack.concatenate([stack.select([0]), stack.select([1, 2])])
    torch.testing.assert_close(both.flat_parameters(), stack.select([0, 1, 2]).flat_parameters())
    module_state = stack.to_module(1).state_dict()
    for key, value in module_state.items():
        torch.testing.assert_close(value, state[key][1])


def test_float32_default_and_repr():
    stack = _stack(dtype=torch.float32)
    assert stack.logits(np.zeros((2, 6))).dtype == torch.float32
    assert "num_models=4" in repr(stack)
    assert "mlp(8,)" in repr(stack)


def test_generators_are_distinct_per_model_and_purpose():
    draws = {
        (k, p): torch.rand(3, generator=derive_generator(5, k, p)).tolist()
        for k in range(3)
        for p in range(3)
    }
    assert len({tuple(v) for v in draws.values()}) == 9
    assert torch.rand(3, generator=derive_generator(5, 1, 2)).tolist() == draws[(1, 2)]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(DpauditError, match="The 'kind' parameter must be one of"):
        ModelSpec(kind="cnn")
    with pytest.raises(DpauditError, match="The 'activation' parameter must be one of"):
        ModelSpec(activation="swish")
    with pytest.raises(
        DpauditError,
        match=r"The 'hidden\[0\]' parameter must be an integer in \[1, inf\)\. Got 0 instead\.",
    ):
        ModelSpec(hidden=(0,))
    with pytest.raises(
        DpauditError,
        match=r"The 'num_classes' parameter must be an integer in \[2, inf\)\. Got 1 instead\.",
    ):
        ModelStack.init(SPECS[0], num_models=1, num_features=2, num_classes=1, seed=0)
    stack = _stack()
    with pytest.raises(DataError, match=r"The 'X' parameter must have shape \(m, 6\)"):
        stack.logits(np.zeros((3, 5)))
    with pytest.raises(DataError, match=r"must hold labels in \[0, 2\]"):
        stack.losses(np.zeros((3, 6)), np.array([0, 1, 3]))
    with pytest.raises(DataError, match="integer labels"):
        stack.losses(np.zeros((3, 6)), np.array([0.0, 1.0, 2.0]))
    with pytest.raises(DpauditError, match=r"lacks the key '2\.weight'"):
        ModelStack.from_state_dict(SPECS[1], {"0.weight": torch.zeros(1, 2, 2)})
