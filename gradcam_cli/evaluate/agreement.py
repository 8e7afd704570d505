"""How alike two maps are: Spearman rank correlation and structural similarity (SSIM), per pair of maps.

The two measures of Adebayo et al. 2018 ("Sanity Checks for Saliency Maps"):
rank correlation asks whether the same pixels matter in the same order,
whatever the scale; SSIM (Wang et al. 2004) whether the maps look alike,
blob for blob. Both take (N, H, W) batches and answer (N,), computed in
float64 on the maps' device, all pairs at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gradcam_cli.errors import UsageError

SSIM_SIGMA = 1.5
SSIM_WINDOW = 11  # skimage's: 2 * int(3.5 * sigma + 0.5) + 1, the Gaussian truncated at 3.5 sigma
SSIM_K1, SSIM_K2 = 0.01, 0.03
DATA_RANGE = 1.0  # maps in [0, 1]


def _pairs(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both as float64 (N, H, W) of one shape: a mismatch is a caller's bug, said before any number is made up."""
    if a.shape != b.shape or a.dim() != 3:
        raise UsageError(f"two batches of maps (N, H, W) of one shape are needed, got {tuple(a.shape)} and {tuple(b.shape)}")
    return a.detach().to(torch.float64), b.detach().to(a.device, torch.float64)


def average_ranks(values: torch.Tensor) -> torch.Tensor:
    """(N, P) ranks 1..P of each row, ties given the mean of the ranks they span (scipy.stats.rankdata's "average").

    After sorting, a run of equal values spans positions start..end; each
    element's start is a running maximum of the run starts before it and its
    end a running minimum of the run ends after it, so no loop over runs.
    """
    ordered, order = values.sort(dim=1, stable=True)
    n, p = ordered.shape
    positions = torch.arange(p, device=values.device).expand(n, p)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    last = torch.ones_like(first)
    last[:, :-1] = first[:, 1:]
    start = torch.where(first, positions, 0).cummax(dim=1).values
    end = torch.where(last, positions, p - 1).flip(1).cummin(dim=1).values.flip(1)
    mean_rank = (start + end).to(torch.float64) / 2 + 1
    return torch.empty_like(mean_rank).scatter_(1, order, mean_rank)


def spearman(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N,) Spearman rank correlation of each pair of maps (N, H, W): the Pearson correlation of their average ranks.

    Ties get the mean of their ranks, as scipy.stats.spearmanr. A constant map
    has no ranking, so its correlation is 0, not NaN: a map that went blank
    after randomisation did not survive it.
    """
    a, b = _pairs(a, b)
    ra, rb = average_ranks(a.flatten(1)), average_ranks(b.flatten(1))
    ra, rb = ra - ra.mean(dim=1, keepdim=True), rb - rb.mean(dim=1, keepdim=True)
    norms = (ra.square().sum(dim=1) * rb.square().sum(dim=1)).sqrt()
    r = (ra * rb).sum(dim=1) / norms.clamp_min(torch.finfo(torch.float64).tiny)
    return torch.where(norms > 0, r.clamp(-1, 1), torch.zeros_like(r))


def gaussian_window(size: int, sigma: float = SSIM_SIGMA, device: torch.device | None = None) -> torch.Tensor:
    """(size, size) normalised Gaussian, the outer product of scipy.ndimage's 1-D kernel."""
    x = torch.arange(size, dtype=torch.float64, device=device) - (size - 1) / 2
    line = torch.exp(-0.5 * (x / sigma) ** 2)
    line = line / line.sum()
    return line[:, None] * line[None, :]


def ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N,) mean structural similarity of each pair of maps (N, H, W) in [0, 1] (Wang et al. 2004).

    As skimage's structural_similarity(gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False, data_range=1): an 11x11 Gaussian window
    (sigma 1.5), K1=0.01, K2=0.03, population (co)variances, and the mean over
    the positions where the window fits (skimage filters the whole map, then
    crops the border the window overhangs: the same numbers). Maps smaller than
    the window, where skimage refuses, get the largest odd window that fits
    (the same Gaussian cut there and renormalised); a 1-pixel map so compares
    only the means.
    """
    a, b = _pairs(a, b)
    fits = min(SSIM_WINDOW, *a.shape[-2:])
    size = fits if fits % 2 else fits - 1
    window = gaussian_window(size, device=a.device)[None, None]
    stack = torch.stack([a, b, a * a, b * b, a * b], dim=1).flatten(0, 1)[:, None]
    mu_a, mu_b, aa, bb, ab = F.conv2d(stack, window).unflatten(0, (a.shape[0], 5))[:, :, 0].unbind(1)
    var_a, var_b, cov = aa - mu_a * mu_a, bb - mu_b * mu_b, ab - mu_a * mu_b
    c1, c2 = (SSIM_K1 * DATA_RANGE) ** 2, (SSIM_K2 * DATA_RANGE) ** 2
    s = (2 * mu_a * mu_b + c1) * (2 * cov + c2) / ((mu_a * mu_a + mu_b * mu_b + c1) * (var_a + var_b + c2))
    return s.flatten(1).mean(dim=1)
