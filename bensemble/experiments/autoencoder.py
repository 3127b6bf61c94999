"""The paper's convolutional auto-encoder (appendix B.1.2), shared by the vision experiments.

MNIST: Conv2d 1->16 stride 2 ReLU, Conv2d 16->32 stride 2 ReLU, Linear 1568->64 ReLU; CIFAR-10:
Conv2d 3->16, 16->32, Linear 2048->256. The decoders mirror them with transposed convolutions and a
final Sigmoid; both are trained for 5 epochs with MSE and Adam. :class:`ConvAutoEncoder` builds
either from the image side and channels.
"""

from __future__ import annotations

import torch
from torch import nn

from bensemble._options import check_count, check_seed
from bensemble._validation import check_positive_int
from bensemble.experiments._common import progress_bar

__all__ = ["AE_BATCH", "ConvAutoEncoder", "encode", "train_autoencoder"]

AE_BATCH = 64


class ConvAutoEncoder(nn.Module):
    """The paper's MNIST auto-encoder (appendix B.1.2), sized by the image side.

    Encoder: Conv2d ``C -> 16`` (3x3, stride 2) ReLU, Conv2d ``16 -> 32`` (stride 2) ReLU,
    Linear ``32 (S/4)^2 -> latent_dim`` ReLU; the decoder mirrors it with transposed
    convolutions and a final Sigmoid. For ``S = 28`` the linear layer is ``1568 -> 64``, as in
    the paper.

    Args:
        side: image side ``S`` (a multiple of 4).
        latent_dim: size of the latent code.
        channels: image channels ``C``.
    """

    def __init__(self, side: int = 28, latent_dim: int = 64, channels: int = 1) -> None:
        super().__init__()
        fn = "ConvAutoEncoder"
        side = check_positive_int(side, "side", fn, minimum=4)
        if side % 4:
            raise ValueError(f"{fn}: `side` must be a multiple of 4 (got {side})")
        latent_dim = check_positive_int(latent_dim, "latent_dim", fn)
        channels = check_positive_int(channels, "channels", fn)
        q = side // 4
        flat = 32 * q * q
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(flat, latent_dim),
            nn.ReLU(),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, flat),
            nn.ReLU(),
            nn.Unflatten(1, (32, q, q)),
            nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(16, channels, 3, stride=2, padding=1, output_padding=1),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``[B, C, S, S]`` of images ``x [B, C, S, S]`` in [0, 1]."""
        return self.decoder(self.encoder(x))


def train_autoencoder(
    images: torch.Tensor,
    *,
    latent_dim: int,
    epochs: int,
    batch_size: int = AE_BATCH,
    seed: int = 0,
    progress: bool = False,
) -> ConvAutoEncoder:
    """Fit a :class:`ConvAutoEncoder` on ``images [N, C, S, S]`` (MSE, Adam, lr 1e-3).

    The initialisation and the batch order come from ``seed``; the global RNG is restored.
    Returns the auto-encoder in eval mode.
    """
    fn = "train_autoencoder"
    latent_dim = check_count(latent_dim, "latent_dim", fn)
    epochs = check_count(epochs, "epochs", fn, minimum=0)
    batch_size = check_count(batch_size, "batch_size", fn)
    seed = check_seed(seed, "seed", fn)
    x = torch.as_tensor(images, dtype=torch.float32)
    if x.ndim != 4 or x.shape[2] != x.shape[3]:
        raise ValueError(f"{fn}: `images` must have shape [N, C, S, S] (got {list(x.shape)})")
    order = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ae = ConvAutoEncoder(side=x.shape[2], latent_dim=latent_dim, channels=x.shape[1])
    opt = torch.optim.Adam(ae.parameters(), lr=1e-3)
    ae.train()
    try:
        epochs_iter = progress_bar(range(epochs), desc="auto-encoder", enabled=progress)
        for _ in epochs_iter:
            for idx in torch.randperm(x.shape[0], generator=order).split(batch_size):
                batch = x[idx]
                opt.zero_grad(set_to_none=True)
                loss = nn.functional.mse_loss(ae(batch), batch)
                loss.backward()
                opt.step()
    finally:
        ae.eval()
    return ae


def encode(ae: ConvAutoEncoder, images: torch.Tensor, batch_size: int = 2048) -> torch.Tensor:
    """Latent codes ``[N, latent_dim]`` (float32) of ``images [N, C, S, S]``."""
    batch_size = check_count(batch_size, "batch_size", "encode")
    x = torch.as_tensor(images, dtype=torch.float32)
    with torch.no_grad():
        return torch.cat([ae.encoder(b) for b in x.split(batch_size)])
