"""A plain Opacus training script: DP-SGD logistic regression on breast_cancer.

Poisson sampling at q = 1/4 (batch size 143 of 569 rows: Opacus' DPDataLoader samples at
1/len(loader) = 1/4), 2 epochs of 4 steps = 8 steps, σ = 1, C = 1. Compare with
``opacus_loop.py``: the same script made auditable by dpaudit (``audits/opacus.toml``),
which still trains once when run as a script.
"""

import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset


def train(X, y):
    model = torch.nn.Linear(X.shape[1], 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    data = TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
    loader = DataLoader(data, batch_size=143)
    engine = PrivacyEngine()
    model, optimizer, loader = engine.make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
    )
    for _epoch in range(2):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
    return model


if __name__ == "__main__":
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype("float32")
    train(X, y)
