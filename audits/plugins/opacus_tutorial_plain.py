"""A tutorial-shaped Opacus script: DP-SGD on breast_cancer with a Dataset and a DataLoader.

Shaped like the Opacus tutorials: a ``Dataset`` class, a model class with its input width
written down, a ``train`` function for one epoch that prints the loss and ε, and ``main``,
which builds the ``DataLoader``, calls ``PrivacyEngine().make_private`` and runs the
epochs. Poisson sampling at q = 1/4 (batch size 143 of 569 rows), 2 epochs of 4 steps,
σ = 1, C = 1. Compare with ``opacus_tutorial.py``: the same script made auditable by
dpaudit (``audits/opacus-tutorial.toml``), which still trains once when run as a script.
"""

import numpy as np
import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, Dataset

EPOCHS = 2
BATCH_SIZE = 143
LR = 0.5
NOISE_MULTIPLIER = 1.0
MAX_GRAD_NORM = 1.0
DELTA = 1e-5


class CancerDataset(Dataset):
    """Rows of features with their labels, as tensors."""

    def __init__(self, X, y):
        self.X = torch.as_tensor(X, dtype=torch.float32)
        self.y = torch.as_tensor(y, dtype=torch.long)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.X[i], self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(30, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def train(model, train_loader, optimizer, privacy_engine, epoch):
    model.train()
    criterion = nn.CrossEntropyLoss()
    losses = []
    for data, target in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    epsilon = privacy_engine.get_epsilon(DELTA)
    print(f"Train Epoch: {epoch} Loss: {np.mean(losses):.6f} (ε = {epsilon:.2f}, δ = {DELTA})")


def main():
    X, y = load_breast_cancer(return_X_y=True)
    train_dataset = CancerDataset(StandardScaler().fit_transform(X), y)
    train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    privacy_engine = PrivacyEngine()
    model, optimizer, train_loader = privacy_engine.make_private(
        module=model,
        optimizer=optimizer,
        data_loader=train_loader,
        noise_multiplier=NOISE_MULTIPLIER,
        max_grad_norm=MAX_GRAD_NORM,
    )
    for epoch in range(1, EPOCHS + 1):
        train(model, train_loader, optimizer, privacy_engine, epoch)
    return model


if __name__ == "__main__":
    main()
