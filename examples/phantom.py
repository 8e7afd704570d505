"""A CT-like phantom volume and a 3-D network that looks for bright spots: `gradcam explain` on volumes, offline.

    python examples/phantom.py phantom.nii.gz      # writes the phantom (and prints where its lesion is)
    gradcam explain phantom.nii.gz --model examples/phantom.py:build --input-size 32x96x96 --window 40,400 \
        --mean 0 --std 1 --method hirescam -o out/

The phantom: a body (an ellipse of soft tissue, ~40 HU) with two lungs (-800 HU)
and one lesion (a sphere, +300 HU), 96 x 96 x 32 voxels of 0.8 x 0.8 x 2.5 mm
stored in DICOM's LPS order (the affine flips x and y), so a map must keep the
scan's own space to line up with it. The network is constructed, not trained:
one Conv3d that averages a voxel's neighbourhood, a threshold that only the
lesion passes in a soft-tissue window, and the mean of what passes as its
score; its map can only lie on the lesion.
"""

from __future__ import annotations

import sys

import numpy as np

SHAPE = (96, 96, 32)
SPACING = (0.8, 0.8, 2.5)
LESION = (60, 38, 18)  # voxel centre of the lesion
LESION_RADIUS_MM = 9.0


def phantom() -> tuple[np.ndarray, np.ndarray]:
    """The phantom's Hounsfield units (x, y, z) and its affine (LPS storage: x and y flipped in RAS)."""
    x, y, z = np.meshgrid(*(np.arange(n, dtype=np.float32) for n in SHAPE), indexing="ij")
    mm = [axis * step for axis, step in zip((x, y, z), SPACING)]
    centre = [n * step / 2 for n, step in zip(SHAPE, SPACING)]
    body = ((mm[0] - centre[0]) / 34) ** 2 + ((mm[1] - centre[1]) / 26) ** 2 <= 1
    lungs = [((mm[0] - centre[0] - side * 15) / 10) ** 2 + ((mm[1] - centre[1] + 3) / 14) ** 2 <= 1 for side in (-1, 1)]
    lesion = sum((m - c * s) ** 2 for m, c, s in zip(mm, LESION, SPACING)) <= LESION_RADIUS_MM**2
    hu = np.full(SHAPE, -1000.0, np.float32)
    hu[body] = 40.0
    for lung in lungs:
        hu[lung & body] = -800.0
    hu[lesion] = 300.0
    noise = np.random.default_rng(0).normal(0.0, 15.0, SHAPE).astype(np.float32)
    affine = np.diag([-SPACING[0], -SPACING[1], SPACING[2], 1.0])
    affine[:3, 3] = [38.4, 38.4, -40.0]
    return hu + noise, affine


def build():  # noqa: ANN201 - the network, for --model examples/phantom.py:build
    """One Conv3d averaging 3x3x3 voxels, a threshold only a window's brightest pass (0.9 of its range), their mean."""
    import torch
    from torch import nn

    class BrightSpots(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv3d(1, 1, 3, padding=1), nn.ReLU())
            self.head = nn.Linear(1, 2)
            with torch.no_grad():
                self.features[0].weight.fill_(1 / 27)
                self.features[0].bias.fill_(-0.9)
                self.head.weight.copy_(torch.tensor([[100.0], [-100.0]]))
                self.head.bias.zero_()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x).mean(dim=(2, 3, 4)))

    return BrightSpots().eval()


if __name__ == "__main__":
    import nibabel

    hu, affine = phantom()
    nibabel.save(nibabel.Nifti1Image(hu, affine), sys.argv[1] if len(sys.argv) > 1 else "phantom.nii.gz")
    print(f"lesion at voxel {LESION}, RAS {tuple(round(float(v), 1) for v in affine[:3, :3] @ LESION + affine[:3, 3])} mm")
