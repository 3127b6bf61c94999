"""Small real models shared by the core tests."""

import pytest
import torch
from torch import nn


def guide_toy() -> nn.Sequential:
    """The practitioner's guide's MC-dropout toy: Linear, BatchNorm1d, ReLU, Dropout, Linear."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3)
    )


@pytest.fixture
def toy() -> nn.Sequential:
    model = guide_toy()
    # give BatchNorm non-trivial running statistics, as after training
    with torch.no_grad():
        model.train()
        for _ in range(5):
            model(torch.randn(32, 4) * 2 + 1)
    model.eval()
    return model


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(6, 4, generator=torch.Generator().manual_seed(123))
