"""The model-parameter randomisation test (Adebayo et al. 2018) and the two agreement measures it reports.

Spearman equals scipy.stats.spearmanr (scipy is a test-time dependency) and
SSIM a numpy transcription of skimage's structural_similarity (skimage is not
installed: its gaussian_filter and crop steps are written out here). The
cascade runs on the shipped shapes example model at 96x96: Grad-CAM at layer4
does not survive it, a map made without the model does, and a stage's own
activations stay identical until the cascade reaches that stage.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import example_batch, left_as_found, require
from gradcam_cli.evaluate.agreement import spearman, ssim
from gradcam_cli.evaluate.baselines import sobel_edges
from gradcam_cli.evaluate.measures import SURVIVAL_THRESHOLD
from gradcam_cli.evaluate.sanity import cascade_steps, cascading_randomisation, reinitialise
from gradcam_cli.layers.stages import stage_paths
from gradcam_cli.model.state import eval_mode


@pytest.fixture(scope="module", autouse=True)
def one_thread_here():
    """conftest's one_thread for the whole module (its fixtures are module-scoped): tiny models, a busy 2-core box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------- agreement


def _scipy_spearman(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    stats = require("scipy.stats")
    return [float(stats.spearmanr(x.flatten().numpy(), y.flatten().numpy()).statistic) for x, y in zip(a, b)]


@pytest.mark.parametrize("levels", [None, 5, 2])
def test_spearman_equals_scipy(levels):
    """Random maps, and quantised ones where most pixels tie (average ranks matter there)."""
    g = torch.Generator().manual_seed(levels or 0)
    a, b = torch.rand(6, 13, 17, generator=g), torch.rand(6, 13, 17, generator=g)
    b[:3] = a[:3] + 0.3 * b[:3]  # some correlated pairs, not only noise around 0
    if levels:
        a, b = (a * levels).floor() / levels, (b * levels).floor() / levels
    assert spearman(a, b).tolist() == pytest.approx(_scipy_spearman(a, b), abs=1e-12)


def test_spearman_of_a_monotone_transform_is_one_and_of_a_constant_map_zero():
    a = torch.rand(4, 9, 9, generator=torch.Generator().manual_seed(1))
    assert spearman(a, a.exp() * 3 - 1).tolist() == pytest.approx([1.0] * 4, abs=1e-12)
    assert spearman(a, -a).tolist() == pytest.approx([-1.0] * 4, abs=1e-12)
    assert spearman(a, torch.zeros_like(a)).tolist() == [0.0] * 4  # blank: no ranking, not NaN


def _skimage_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """skimage.metrics.structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1)."""
    ndimage = require("scipy.ndimage")
    sigma, truncate = 1.5, 3.5
    win_size = 2 * int(truncate * sigma + 0.5) + 1

    def filt(im):
        return ndimage.gaussian_filter(im, sigma=sigma, mode="reflect", truncate=truncate)

    ux, uy, uxx, uyy, uxy = (filt(im) for im in (a, b, a * a, b * b, a * b))
    vx, vy, vxy = uxx - ux * ux, uyy - uy * uy, uxy - ux * uy
    c1, c2 = 0.01**2, 0.03**2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
    pad = (win_size - 1) // 2
    return float(s[pad:-pad, pad:-pad].mean())


def test_ssim_equals_skimage_formula():
    g = torch.Generator().manual_seed(2)
    a = torch.rand(3, 16, 21, generator=g)
    b = (0.6 * a + 0.4 * torch.rand(3, 16, 21, generator=g)).clamp(0, 1)
    expected = [_skimage_ssim(x.double().numpy(), y.double().numpy()) for x, y in zip(a, b)]
    assert ssim(a, b).tolist() == pytest.approx(expected, abs=1e-12)


def test_ssim_identity_constant_maps_and_symmetry():
    g = torch.Generator().manual_seed(3)
    a, b = torch.rand(4, 20, 20, generator=g), torch.rand(4, 20, 20, generator=g)
    assert ssim(a, a).tolist() == pytest.approx([1.0] * 4, abs=1e-12)
    assert torch.equal(ssim(a, b), ssim(b, a))
    c1 = 0.01**2
    for u, v in [(0.3, 0.7), (0.0, 1.0), (0.5, 0.5)]:
        u, v = float(torch.tensor(u)), float(torch.tensor(v))  # the float32 values the maps hold
        closed = (2 * u * v + c1) / (u * u + v * v + c1)
        assert float(ssim(torch.full((1, 12, 12), u), torch.full((1, 12, 12), v))[0]) == pytest.approx(closed, abs=1e-9)


@pytest.mark.parametrize("shape", [(7, 30), (4, 4), (1, 1)])
def test_ssim_of_maps_smaller_than_the_window(shape):
    """The largest odd window that fits: still 1 for identical maps, symmetric, and within [-1, 1]."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.rand(2, *shape, generator=g), torch.rand(2, *shape, generator=g)
    assert ssim(a, a).tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
    assert torch.equal(ssim(a, b), ssim(b, a)) and bool((ssim(a, b).abs() <= 1).all())


# ---------------------------------------------------------------- the cascade on the example model


@pytest.fixture(scope="module")
def shapes():
    """The example model (eval mode), its 8 scenes as one normalised batch at 96x96, and each scene's top class."""
    model, x, classes = example_batch()
    return model, x, classes.tolist()


def activation_map(net: torch.nn.Module, x: torch.Tensor, path: str) -> torch.Tensor:
    """(N, h, w) mean absolute activation of a layer of `net` (eval mode), min-max scaled: depends on the layers up to it only."""
    seen: list[torch.Tensor] = []
    handle = net.get_submodule(path).register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    try:
        with eval_mode(net), torch.no_grad():
            net(x)
    finally:
        handle.remove()
    m = seen[0].abs().mean(dim=1)
    low, high = m.flatten(1).amin(1)[:, None, None], m.flatten(1).amax(1)[:, None, None]
    return (m - low) / (high - low).clamp_min(1e-12)


@pytest.fixture(scope="module")
def cascade(shapes):
    """One cascade with Grad-CAM at layer4, the Sobel map (no model at all) and two stages' own activations."""
    from gradcam_cli import cam

    model, x, classes = shapes

    def maps_of(net):
        return {
            "gradcam": cam(net, x, "layer4", classes=classes),
            "sobel": sobel_edges(x),
            "layer4": activation_map(net, x, "layer4"),
            "layer2": activation_map(net, x, "layer2"),
        }

    with left_as_found(model):
        return cascading_randomisation(model, x, stage_paths(model), maps_of)


def test_cascade_steps_of_the_example_model(shapes):
    """timm's stages of test_resnet are act1, layer1..4: act1 (a ReLU) has no parameters of its own and is left out;
    conv1 (a Sequential of convs and norms) and bn1 run before it, so they are the stem."""
    model, x, _ = shapes
    assert stage_paths(model) == ["act1", "layer1", "layer2", "layer3", "layer4"]
    with left_as_found(model):
        steps = cascade_steps(model, stage_paths(model), x)
    assert [s.name for s in steps] == ["head", "layer4", "layer3", "layer2", "layer1", "stem"]
    owners = [name for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    placed = [name for s in steps for name in s.modules]
    assert sorted(placed) == sorted(owners) and len(placed) == len(set(placed))
    assert steps[0].modules == ("fc",)
    assert set(steps[-1].modules) == {n for n in owners if n.startswith(("conv1.", "bn1"))}
    for s in steps[1:-1]:
        assert all(n.startswith(f"{s.name}.") for n in s.modules)


def _survives(cascade, method: str, threshold: float = SURVIVAL_THRESHOLD) -> bool:
    """The summary's flag (evaluate/summary.py): the last step's mean rank correlation at the threshold or above."""
    return bool(cascade.spearman[method][-1].mean() >= threshold)


@pytest.mark.slow
def test_gradcam_does_not_survive_and_a_model_free_map_does(cascade):
    """The issue's acceptance test. Grad-CAM at layer4 weighs layer4's channels by the head's gradient, so it falls at
    the first step (the head) from the trained model's 1 and stays low; the Sobel map never looks at the model."""
    assert cascade.steps == ["head", "layer4", "layer3", "layer2", "layer1", "stem"]
    grad = cascade.spearman["gradcam"].mean(dim=1)
    assert cascade.spearman["gradcam"].shape == cascade.ssim["gradcam"].shape == (6, 8)
    assert float(grad[0]) < 0.5 and float(grad[-1]) < 0.5 and float(grad.max()) < 0.5
    assert float(cascade.ssim["gradcam"].mean(dim=1).max()) < 0.5
    assert not _survives(cascade, "gradcam")
    assert torch.equal(cascade.spearman["sobel"], torch.ones(6, 8, dtype=torch.float64))
    assert torch.allclose(cascade.ssim["sobel"], torch.ones(6, 8, dtype=torch.float64), rtol=0, atol=1e-12)
    assert _survives(cascade, "sobel") and _survives(cascade, "gradcam", threshold=-1.0)
    assert SURVIVAL_THRESHOLD == 0.5


@pytest.mark.slow
def test_a_stage_changes_only_when_the_cascade_reaches_it(cascade):
    """Cumulative, stage by stage: layer4's activations are those of the trained model until layer4 is randomised,
    layer2's until layer2 is; after that they are not (and stay not, every later step adding noise below)."""
    layer4, layer2 = cascade.spearman["layer4"].mean(dim=1), cascade.spearman["layer2"].mean(dim=1)
    assert float(layer4[0]) == pytest.approx(1.0, abs=1e-12)
    assert float(layer4[1:].max()) < 0.9
    assert layer2[:3].tolist() == pytest.approx([1.0] * 3, abs=1e-12)
    assert float(layer2[3:].max()) < 0.9


def test_user_model_rng_and_repeatability(shapes):
    """Nothing of the caller's changes (values, hooks, modes, the global random stream); a seed gives the same numbers."""
    model, x, _ = shapes
    small = x[:3]

    def maps_of(net):
        return {"layer3": activation_map(net, small, "layer3")}

    model.train()
    try:
        with left_as_found(model):
            rng = torch.get_rng_state()
            first = cascading_randomisation(model, small, stage_paths(model), maps_of, seed=7)
            again = cascading_randomisation(model, small, stage_paths(model), maps_of, seed=7, original=maps_of(model))
            other = cascading_randomisation(model, small, stage_paths(model), maps_of, seed=8)
            assert torch.equal(torch.get_rng_state(), rng)
            steps = cascade_steps(model, stage_paths(model), small)  # the probe forward on the caller's own model
        assert all(m.training for m in model.modules())
    finally:
        model.eval()
    assert [s.name for s in steps] == first.steps
    assert torch.equal(first.spearman["layer3"], again.spearman["layer3"]) and torch.equal(first.ssim["layer3"], again.ssim["layer3"])
    assert not torch.equal(first.spearman["layer3"], other.spearman["layer3"])


def test_vit_cascade_covers_prefix_tokens():
    """A ViT's stages are blocks (their norm1: the map entering the block); cls_token and pos_embed, owned by the root
    and used before the first block, are in the stem and re-initialised there from N(0, 0.02)."""
    import timm

    torch.manual_seed(0)
    vit = timm.create_model("test_vit", pretrained=False).eval()
    paths = stage_paths(vit)
    assert paths == ["blocks.1.norm1", "blocks.3.norm1", "blocks.5.norm1"]
    steps = cascade_steps(vit, paths, torch.zeros(1, 3, 160, 160))
    assert [s.name for s in steps] == ["head", "blocks.5.norm1", "blocks.3.norm1", "blocks.1.norm1", "stem"]
    owners = [name for name, m in vit.named_modules() if any(True for _ in m.parameters(recurse=False))]
    placed = [name for s in steps for name in s.modules]
    assert sorted(placed) == sorted(owners) and len(placed) == len(set(placed))
    assert {"", "patch_embed.proj", "blocks.0.attn.qkv"} <= set(steps[-1].modules)  # "" is the root: cls_token, pos_embed
    assert {"norm", "head", "blocks.5.mlp.fc2"} <= set(steps[0].modules)
    before = vit.pos_embed.detach().clone()
    reinitialise(vit, steps[-1].modules, seed=0)
    assert not torch.equal(vit.pos_embed, before)
    after = vit.pos_embed.detach()
    assert float(after.std()) == pytest.approx(0.02, rel=0.2) and float(vit.cls_token.detach().abs().max()) > 0
    assert float(F.cosine_similarity(after.flatten(), before.flatten(), dim=0).abs()) < 0.2


# ---------------------------------------------------------------- networks no hub knows, through the command

DOMAINBED_NET = '''
import warnings

import torch
import torchvision
from torch import nn


class Identity(nn.Module):
    def forward(self, x):
        return x


class ResNet(nn.Module):
    """DomainBed's featurizer: the backbone held as .network, its fc an Identity, batch norms frozen, dropout after."""

    def __init__(self, sequential):
        super().__init__()
        network = torchvision.models.resnet18(weights=None)
        del network.fc
        network.fc = Identity()
        if sequential:  # the body itself a Sequential: stem, maxpool, layer1..4, pool, flatten
            network = nn.Sequential(*list(network.children())[:-1], nn.Flatten())
        self.network = network
        self.n_outputs = 512
        self.dropout = nn.Dropout(0.1)
        self.freeze_bn()

    def forward(self, x):
        return self.dropout(self.network(x))

    def train(self, mode=True):
        super().train(mode)
        self.freeze_bn()
        return self

    def freeze_bn(self):
        for module in self.network.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()


def build(num_classes=3, sequential=False):
    # as torchvision does for DomainBed's resnet18(pretrained=...): a UserWarning from the model's own code
    warnings.warn("'pretrained' is deprecated, use 'weights'", UserWarning)
    torch.manual_seed(0)
    return nn.Sequential(ResNet(sequential), nn.Linear(512, num_classes))
'''


@pytest.mark.slow
@pytest.mark.parametrize(
    ("given", "stages"),
    [  # the command names the layer; without it the probe's default layer is the same module
        (("--layer", "0.network.layer4"), ["0.network.layer4", "0.network.layer3", "0.network.layer2", "0.network.layer1"]),
        (("--model-kwargs", "sequential=true"), ["0.network.7", "0.network.6", "0.network.5", "0.network.4"]),
    ],
    ids=["featurizer", "sequential-body"],
)
def test_the_sanity_check_of_a_domainbed_network(run_cli, tmp_path, given, stages):
    """nn.Sequential(featurizer, nn.Linear), the backbone inside as `.network`: no hub names its stages and the root's
    children hold no map, so the probe finds them inside however deep; the model's own warning is one line."""
    from conftest import write_image

    (tmp_path / "net.py").write_text(DOMAINBED_NET)
    for index in range(2):
        write_image(tmp_path / f"photo{index}.png", 120, 90, seed=index)
    result = run_cli("eval", "photo0.png", "photo1.png", "--model", "net.py:build", *given, "--input-size", "96",
                     "--methods", "gradcam", "--metrics", "sanity", "--json", "--quiet", "-o", "out")  # fmt: skip
    assert result.code == 0, result.stderr
    records = [r for r in result.records() if not r["baseline"]]
    assert len(records) == 2 and all(r["ok"] for r in records)
    for record in records:
        assert record["sanity"]["steps"] == ["head", *stages, "stem"]
        assert len(record["sanity"]["spearman"]) == len(stages) + 2
    lines = result.stderr.splitlines()
    assert all(line.startswith("gradcam: ") for line in lines), result.stderr  # no path, no source line, no traceback
    assert lines.count("gradcam: UserWarning: 'pretrained' is deprecated, use 'weights'") == 1


def test_the_probe_rules_stages_pass_over_a_shared_module():
    """A module that runs at every resolution (one shared activation) is never a stage's module: where a stage ends is
    where its module first finishes, and a shared one first finishes in the first stage."""
    from torch import nn

    from gradcam_cli.layers.stages import stage_paths

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU()
            self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, stride=2, padding=1) for i in range(3))
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            for conv in self.convs:
                x = self.act(conv(x))
            return self.head(x.mean(dim=(2, 3)))

    model = Shared().eval()
    assert stage_paths(model, "", None, input_hw=(32, 32)) == ["convs.0", "convs.1", "convs.2"]
    steps = cascade_steps(model, ["convs.0", "convs.1", "convs.2"], torch.zeros(1, 3, 32, 32))
    assert [s.name for s in steps] == ["head", "convs.2", "convs.1", "convs.0"]
