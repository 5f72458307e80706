"""A tutorial-shaped Opacus script for images: a small CNN on scikit-learn's 8×8 digits.

Shaped like the Opacus image tutorials: a ``Dataset`` class that shapes each row of 64
pixels into a 1×8×8 image, a CNN, ``PrivacyEngine().make_private`` and an epoch loop that
prints the loss. Poisson sampling at q = 1/4 (batch size 450 of 1797 images), 2 epochs of
4 steps, σ = 1, C = 1. ``tutorial_images.py`` is the same script made auditable; the
adapter builds each model's Dataset with the script's own class.
"""

import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, Dataset

from dpaudit.opacus_adapter import opacus_trainer

EPOCHS = 2
BATCH_SIZE = 450
LR = 0.5
NOISE_MULTIPLIER = 1.0
MAX_GRAD_NORM = 1.0


class DigitImages(Dataset):
    """Rows of 64 pixels as 1×8×8 images, with their labels."""

    def __init__(self, X, y):
        self.images = torch.as_tensor(X, dtype=torch.float32).reshape(-1, 1, 8, 8)
        self.labels = torch.as_tensor(y, dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3)
        self.fc = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@opacus_trainer(dataset=DigitImages)
def main(train_dataset):
    train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE)
    model = CNN()
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
        for images, labels in train_loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}")
    return model


if __name__ == "__main__":
    digits = load_digits()
    main(DigitImages(digits.data / 16, digits.target))
