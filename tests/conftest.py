"""Shared test settings."""

from __future__ import annotations

import os

import torch

# Two xdist workers on a 2-core machine: one intra-op thread each avoids oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
