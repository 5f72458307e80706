"""Opacus loops with planted bugs, audited through dpaudit's Opacus adapter.

Each is the loop of ``audits/plugins/opacus_plain.py`` (logistic regression, batch size
143 of 569 rows so q = 1/4, 2 epochs = 8 steps, σ = 1, C = 1) with one bug a user could
make; ``correct`` has none. ``tests/test_opacus_adapter.py`` audits each one.
"""

import torch
from opacus import PrivacyEngine
from opacus.optimizers import DPOptimizer
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

from dpaudit.opacus_adapter import opacus_trainer


class QuietNoise(DPOptimizer):
    """σ/10: the noise is drawn at σC/10 while ``noise_multiplier`` (and so the
    accountant, which reads it after the noise) still says σ."""

    def add_noise(self):
        sigma = self.noise_multiplier
        self.noise_multiplier = sigma / 10
        try:
            super().add_noise()
        finally:
            self.noise_multiplier = sigma


class NoClipping(DPOptimizer):
    """Clipping off: the per-example gradients are summed as they are."""

    def clip_and_accumulate(self):
        for p in self.params:
            grad = self._get_flat_grad_sample(p).sum(dim=0)
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad


def _setup(X, y, **loader_kwargs):
    model = torch.nn.Linear(X.shape[1], 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    data = TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
    return model, optimizer, DataLoader(data, **{"batch_size": 143, **loader_kwargs})


def _loop(model, optimizer, loader, epochs=2):
    for _epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    return model


def _private(X, y, optimizer_class=None, **make_private_kwargs):
    model, optimizer, loader = _setup(X, y)
    model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        **make_private_kwargs,
    )
    if optimizer_class is not None:
        optimizer.__class__ = optimizer_class  # the user's own DPOptimizer subclass
    return _loop(model, optimizer, loader)


@opacus_trainer
def correct(X, y):
    return _private(X, y)


@opacus_trainer
def sigma_tenth(X, y):
    return _private(X, y, QuietNoise)


@opacus_trainer
def no_clipping(X, y):
    return _private(X, y, NoClipping)


@opacus_trainer
def one_of_two_epochs(X, y):
    """σ calibrated by make_private_with_epsilon for 1 epoch, then 2 epochs trained."""
    model, optimizer, loader = _setup(X, y)
    model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private_with_epsilon(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        target_epsilon=4.0,
        target_delta=1e-5,
        epochs=1,
        max_grad_norm=1.0,
    )
    return _loop(model, optimizer, loader, epochs=2)


@opacus_trainer
def shuffled_fixed(X, y):
    """Shuffled fixed-size batches (poisson_sampling=False), accounted as Poisson."""
    model, optimizer, loader = _setup(X, y, shuffle=True)
    model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        poisson_sampling=False,
    )
    return _loop(model, optimizer, loader)


@opacus_trainer
def weighted_sampler(X, y):
    """A WeightedRandomSampler drawing n/2 rows per epoch (Opacus #813): Opacus' Poisson
    loader samples at 1/len(loader) = 1/2, not the configured 143/569 = 1/4. Four epochs
    of 2 steps keep the 8 steps."""
    weights = torch.ones(len(y))
    sampler = WeightedRandomSampler(weights, num_samples=len(y) // 2)
    model, optimizer, loader = _setup(X, y, sampler=sampler)
    model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
    )
    return _loop(model, optimizer, loader, epochs=4)
