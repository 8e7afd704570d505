"""The first principal component of a layer's (weighted) activations, per image.

Shared by Eigen-CAM, Eigen-Grad-CAM and `--eigen-smooth`. A reduced SVD of the
centred (H*W) x C matrix: its cost grows with min(H*W, C), never with (H*W)^2
as the full SVD the reference computes does.

Sign: a singular vector is defined only up to sign, and the reference keeps
whatever its LAPACK build returns, which no convention reproduces. Here the
projection is flipped when its most negative value outweighs its most positive
one (the sign correction of Chung & Ying, "Seg-Eigen-CAM", Appl. Sci. 15(13),
2025, Eq. 13), so the stronger side survives the ReLU and the same input
always gives the same map.
"""

from __future__ import annotations


import math

import torch


def first_component(weighted: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) → (N, H, W), or (N, C, T, H, W) → (N, T, H, W): each position projected on the first principal axis."""
    n, c, *spatial = weighted.shape
    rows = weighted.float().nan_to_num(nan=0.0).reshape(n, c, math.prod(spatial)).transpose(1, 2)  # N x HW x C (a clip: N x THW x C)
    centred = rows - rows.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    projection = (centred @ vh[:, 0, :, None]).squeeze(-1)  # N x HW
    flip = projection.amin(dim=1).abs() > projection.amax(dim=1).abs()
    projection = torch.where(flip[:, None], -projection, projection)
    return projection.reshape(n, *spatial)
