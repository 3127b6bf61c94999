"""Shared test configuration."""

import os

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

torch.set_num_threads(1)
settings.register_profile("ci", max_examples=40, deadline=None)
settings.load_profile("ci")
