"""Maps that know nothing of the model, to set beside every method: a method must beat them to be believed.

A random map (uniform noise, seeded per image so runs repeat), a centred
Gaussian (photographers put the object in the middle: the bias a map may
merely copy) and Sobel edges of the image (what a map that only follows
contrast would show; Adebayo et al. 2018 found some methods close to an
edge detector). Each is (N, H, W) in [0, 1].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GAUSSIAN_SIGMA = 0.25  # of the image's side: the centre bias of a photo, not a dot


def random_maps(n: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """Uniform noise, the same for the same seed."""
    return torch.rand((n, height, width), generator=torch.Generator().manual_seed(seed))


def centre_gaussian(n: int, height: int, width: int, sigma: float = GAUSSIAN_SIGMA) -> torch.Tensor:
    """A Gaussian at the centre, `sigma` a fraction of each side, peak 1."""
    ys = (torch.arange(height, dtype=torch.float32) + 0.5) / height - 0.5
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) / width - 0.5
    blob = torch.exp(-(ys[:, None] ** 2 + xs[None, :] ** 2) / (2 * sigma**2))
    return blob.expand(n, height, width).clone()


def sobel_edges(x: torch.Tensor) -> torch.Tensor:
    """The gradient magnitude of each image's channel mean (3x3 Sobel, replicated border), scaled to [0, 1]."""
    gray = x.float().mean(dim=1, keepdim=True)
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], device=x.device)
    kernels = torch.stack([kx, kx.T])[:, None]
    padded = F.pad(gray, (1, 1, 1, 1), mode="replicate")
    magnitude = F.conv2d(padded, kernels).pow(2).sum(dim=1).sqrt()
    peak = magnitude.flatten(1).amax(dim=1).clamp_min(1e-12)[:, None, None]
    return (magnitude / peak).cpu()
