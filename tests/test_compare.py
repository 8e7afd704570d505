"""`gradcam compare` (issue 11, part 2): the grid's geometry and labels, its cells against explain(), the stages of a model."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from conftest import EXAMPLES, CliResult, SmallCnn, shared_timm_model, tv_resnet18
from gradcam_cli.outputs.grid import BACKGROUND, CELL, LONGEST, MIN_SLOT, cell_size, draw_grid, fit_cell, wrapped
from gradcam_cli.outputs.text import fitted, font

SHAPES = EXAMPLES / "shapes_images"
STAR = SHAPES / "star_1.jpg"  # 400 x 260: shipped with the repo, and the example model knows it (class "star")
MODEL = (
    "-m", "test_resnet", "--no-pretrained",
    "--weights", str(EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"),
    "--labels", str(EXAMPLES / "shapes_model" / "labels.txt"),
)  # fmt: skip
# Both sides of a cell check run the same code on the same weights in one process: the pixels should be equal.
# The tolerance allows one map value a float ulp away to round to the next colour-map entry (jet steps up to
# 4 levels per channel), halved by alpha 0.5: at most 2 levels of 255, far below what another map would give.
TOLERANCE = 2

pytestmark = pytest.mark.usefixtures("one_thread")


def _photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _solid_cells(photo: np.ndarray, rows: int, columns: int) -> list[list[np.ndarray]]:
    """One flat colour per cell, none white: where each cell landed is plain to see."""
    return [[np.full_like(photo, (20 + 30 * r, 40 + 25 * c, 200 - 10 * r)) for c in range(columns)] for r in range(rows)]


def _inside(box: tuple[int, int, int, int], shape: tuple[int, ...]) -> bool:
    x, y, w, h = box
    return 0 <= x and 0 <= y and x + w <= shape[1] and y + h <= shape[0]


def _mask(shape: tuple[int, ...], boxes: list[tuple[int, int, int, int]]) -> np.ndarray:
    mask = np.zeros(shape[:2], bool)
    for x, y, w, h in boxes:
        mask[y : y + h, x : x + w] = True
    return mask


def _within(inner: tuple[int, int, int, int], outer: tuple[int, int, int, int]) -> bool:
    (x, y, w, h), (ox, oy, ow, oh) = inner, outer
    return ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh


def _ink(picture: np.ndarray) -> np.ndarray:
    return (picture != np.array(BACKGROUND, np.uint8)).any(axis=2)


# ---------------------------------------------------------------- the grid


@pytest.mark.parametrize("rows, columns", [(2, 2), (6, 8)])
@pytest.mark.parametrize("height, width", [(120, 180), (300, 60), (45, 400)], ids=["landscape", "tall", "wide"])
def test_the_grid_puts_every_cell_in_its_box_and_every_label_in_its_band(rows: int, columns: int, height: int, width: int) -> None:
    photo = _photo(height, width)
    cells = _solid_cells(photo, rows, columns)
    layers = [f"stages.{r}.blocks.{r + 1}" for r in range(rows)]
    methods = ["gradcam", "gradcam++", "scorecam", "layercam", "xgradcam", "hirescam", "eigencam", "ablationcam"][:columns]
    grid = draw_grid(photo, cells, rows=layers, columns=methods, header="tabby, tabby cat  p=0.83  ·  resnet50")
    picture = grid.picture
    assert picture.dtype == np.uint8 and picture.shape[2] == 3
    size = cell_size((height, width))
    long, short = max(height, width), min(height, width)
    assert abs(size[0] / size[1] - width / height) <= width / height / min(size)  # the aspect kept, to the pixel rounded
    if short * CELL / long >= CELL * MIN_SLOT:
        assert max(size) == CELL  # a photo no thinner than 2:1: its longest side is the cell's
    else:
        assert min(size) == CELL * MIN_SLOT or max(size) == CELL * LONGEST  # a thin one: its short side half a cell
    boxes = [box for row in grid.cells for box in row]
    assert len(grid.cells) == rows and all(len(row) == columns for row in grid.cells)
    for r, row in enumerate(grid.cells):
        for c, box in enumerate(row):
            assert box[2:] == size and _inside(box, picture.shape)
            x, y, w, h = box
            assert np.array_equal(picture[y : y + h, x : x + w], fit_cell(cells[r][c], size))  # the cell, untouched by any text
            assert box[0] == grid.cells[0][c][0] and box[1] == row[0][1]  # columns and rows in line
            assert c == 0 or box[0] > row[c - 1][0] + w  # apart, left to right
            assert r == 0 or box[1] > grid.cells[r - 1][c][1] + h  # and top to bottom
    x, y, w, h = grid.input
    assert x + w < grid.cells[0][0][0] and y == grid.cells[0][0][1]  # the original first, in the first row
    assert np.array_equal(picture[y : y + h, x : x + w], fit_cell(photo, size))
    labels = [grid.header, grid.input_label, *grid.column_labels, *grid.row_labels]
    assert all(_inside(box, picture.shape) for box in labels)
    assert not (_mask(picture.shape, labels) & _mask(picture.shape, [*boxes, grid.input])).any()  # bands and cells apart
    assert _within(grid.legend, grid.header) and _within(grid.bar, grid.legend)  # the colour scale in the header band
    ink = _ink(picture)
    assert not (ink & ~_mask(picture.shape, [*labels, *boxes, grid.input])).any(), "text drawn outside its band"
    for box in labels:
        assert ink[_mask(picture.shape, [box])].any(), f"no text in the label at {box}"


def test_the_text_is_sized_from_the_cell_so_small_and_large_grids_read_alike() -> None:
    photo = _photo(120, 180)
    small = draw_grid(photo, _solid_cells(photo, 2, 2), rows=["a", "b"], columns=["gradcam", "hirescam"], header="cat  p=0.50")
    large = draw_grid(photo, _solid_cells(photo, 6, 8), rows=list("abcdef"), columns=["gradcam", *"bcdefgh"], header="cat  p=0.50")

    def text_height(grid, box) -> int:
        x, y, w, h = box
        return int(_ink(grid.picture[y : y + h, x : x + w]).any(axis=1).sum())

    assert text_height(small, small.column_labels[0]) == text_height(large, large.column_labels[0]) >= 11
    assert text_height(small, small.header) == text_height(large, large.header) > text_height(small, small.column_labels[0])
    assert small.cells[0][0][2:] == large.cells[0][0][2:]


def test_long_labels_are_cut_with_an_ellipsis_or_wrapped_never_past_their_place() -> None:
    long = "a very long class name, with synonyms, and more synonyms, and still more of them  p=0.99  ·  resnet50"
    short = fitted(long, font(18), 200)
    assert short.endswith("…") and long.startswith(short[:-1])
    assert fitted("cat", font(18), 200) == "cat"
    lines = wrapped("encoder.layers.encoder_layer_11.ln_1", 18, 150, most=3)
    assert "".join(lines) == "encoder.layers.encoder_layer_11.ln_1" and 1 < len(lines) <= 3
    cut = wrapped("encoder.layers.encoder_layer_11.ln_1", 18, 150, most=1)
    assert len(cut) == 1 and cut[0].endswith("…")
    photo = _photo(45, 400)  # wide cells: a row is a slot of half a cell, the row label gets what fits in it
    grid = draw_grid(photo, _solid_cells(photo, 2, 2), rows=["x." * 60, "y"], columns=["m" * 80, "gradcam"], header=long * 3)
    ink = _ink(grid.picture)
    labels = [grid.header, grid.input_label, *grid.column_labels, *grid.row_labels]
    assert not (ink & ~_mask(ink.shape, [*labels, *[b for row in grid.cells for b in row], grid.input])).any()


def test_the_grid_refuses_cells_that_do_not_match_the_labels_or_the_photo() -> None:
    photo = _photo(20, 30)
    with pytest.raises(ValueError, match="rows of"):
        draw_grid(photo, _solid_cells(photo, 2, 2), rows=["a"], columns=["m", "n"], header="")
    with pytest.raises(ValueError, match="shape"):
        draw_grid(photo, [[_photo(21, 30)]], rows=["a"], columns=["m"], header="")


def test_a_panorama_fills_its_cells_and_the_grid_is_mostly_picture() -> None:
    """A 2400x300 panorama: cells of its aspect, tall enough to see (the old 256x32 cells were mostly white space)."""
    photo = _photo(300, 2400)
    grid = draw_grid(photo, _solid_cells(photo, 3, 2), rows=["layer2", "layer3", "layer4"], columns=["gradcam", "layercam"], header="x")
    boxes = [grid.input, *(box for row in grid.cells for box in row)]
    for _x, _y, w, h in boxes:
        assert (w, h) == (CELL * LONGEST, CELL * MIN_SLOT) == (8 * h, h)  # 1024x128: 8:1, as the photo
    covered = sum(w * h for _, _, w, h in boxes)
    layout = len(grid.cells) * (len(grid.cells[0]) + 1) * boxes[0][2] * boxes[0][3]  # every slot, the empty ones too
    assert covered / layout > 0.7 and layout / grid.picture[..., 0].size > 0.7  # slots are the grid, pictures fill them
    tall = draw_grid(photo.transpose(1, 0, 2).copy(), [[photo.transpose(1, 0, 2).copy()]], rows=["a"], columns=["m"], header="x")
    assert tall.cells[0][0][2:] == (128, 1024)  # a tall strip likewise


def test_the_header_holds_the_colour_scale_of_the_colour_map_used() -> None:
    from gradcam_cli.outputs.legend import BAR_LENGTH, EACH_RAW, bar_pixels
    from gradcam_cli.vocab import Colormap

    photo = _photo(120, 180)
    drawn = {
        (name, raw): draw_grid(
            photo, _solid_cells(photo, 2, 2), rows=["a", "b"], columns=["gradcam", "hirescam"], header="cat  p=0.50",
            colormap=Colormap(name), scale=EACH_RAW if raw else None,
        )
        for name in ("jet", "viridis") for raw in (False, True)
    }  # fmt: skip
    for (name, _raw), grid in drawn.items():
        x, y, w, h = grid.bar
        assert w == BAR_LENGTH * _label_px() and h >= 4
        assert np.array_equal(grid.picture[y : y + h, x : x + w], bar_pixels(Colormap(name), w, h))  # 0 at the left, 1 at the right
        ink = _ink(grid.picture)
        lx, ly, lw, lh = grid.legend
        words = ink[ly : ly + lh, lx : x - 1].any() and ink[ly : ly + lh, x + w + 1 : lx + lw].any()
        assert words, "the ends of the bar are labelled"
    jet, viridis, raw = drawn[("jet", False)], drawn[("viridis", False)], drawn[("jet", True)]
    assert not np.array_equal(jet.picture, viridis.picture)
    lx, ly, lw, lh = jet.legend
    assert not np.array_equal(jet.picture[ly : ly + lh, lx : lx + lw], raw.picture[ly : ly + lh, lx : lx + lw])  # 0/1 or min/max
    narrow = _photo(300, 40)  # one column of a thin photo: no room beside the header text, the scale gets a line of its own
    grid = draw_grid(narrow, [[narrow]], rows=["a"], columns=["m"], header="a long class name, with synonyms  p=0.99  ·  resnet50")
    assert _within(grid.legend, grid.header) and grid.legend[1] > grid.header[1] and _inside(grid.legend, grid.picture.shape)


def _label_px() -> int:
    """The label text size of a grid drawn with the default cell: the colour scale's."""
    from gradcam_cli.outputs.grid import MIN_TEXT_PX, TEXT

    return max(MIN_TEXT_PX, round(CELL * TEXT))


def test_each_row_says_its_maps_resolution_after_the_layer() -> None:
    photo = _photo(120, 180)
    cells = _solid_cells(photo, 2, 2)
    rows = ["stages.0.blocks.1.norm1", "stages.3.blocks.2.norm1"]  # long: the gutter is as wide as it gets, with notes or not
    plain = draw_grid(photo, cells, rows=rows, columns=["gradcam", "hirescam"], header="cat")
    noted = draw_grid(photo, cells, rows=rows, columns=["gradcam", "hirescam"], header="cat", notes=["28x28", "7x7"])
    assert plain.picture.shape == noted.picture.shape and plain.cells == noted.cells
    labels = _mask(plain.picture.shape, list(noted.row_labels))
    changed = (plain.picture != noted.picture).any(axis=2)
    assert changed[labels].any() and not changed[~labels].any()  # the notes are drawn in the row labels, nowhere else
    assert all(changed[y : y + h, x : x + w].any() for x, y, w, h in noted.row_labels)  # every row's note
    short = draw_grid(photo, cells, rows=["l3", "l4"], columns=["gradcam", "hirescam"], header="cat", notes=["14x14", "7x7"])
    x, y, w, h = short.row_labels[0]
    assert ink_rows(short.picture[y : y + h, x : x + w]) == 1, "`l3 · 14x14` on one line when it fits"
    assert short.row_labels[0][2] > draw_grid(photo, cells, rows=["l3", "l4"], columns=["gradcam", "hirescam"], header="c").row_labels[0][2]


def ink_rows(picture: np.ndarray) -> int:
    """How many separate runs of rows hold ink: the lines of text drawn."""
    rows = _ink(picture).any(axis=1).astype(int)
    return int((np.diff(np.r_[0, rows]) == 1).sum())


# ---------------------------------------------------------------- stages


def test_stages_of_a_timm_model_come_from_its_feature_info() -> None:
    from gradcam_cli.layers.stages import stage_paths
    from gradcam_cli.model.timm_hub import TIMM

    assert stage_paths(shared_timm_model("test_resnet"), "test_resnet", TIMM) == ["act1", "layer1", "layer2", "layer3", "layer4"]
    assert stage_paths(shared_timm_model("test_convnext"), "test_convnext", TIMM) == [f"stages.{i}" for i in range(4)]


def test_stages_of_a_vit_are_every_kth_block_ending_at_the_default_layer() -> None:
    from gradcam_cli.layers.defaults import default_layer_paths
    from gradcam_cli.layers.paths import resolve_layer
    from gradcam_cli.layers.stages import stage_paths
    from gradcam_cli.model.blocks import every_kth
    from gradcam_cli.model.timm_hub import TIMM

    vit = shared_timm_model("test_vit")  # 6 blocks, one resolution throughout: feature_info says nothing of stages
    paths = stage_paths(vit, "test_vit", TIMM)
    assert paths == ["blocks.1.norm1", "blocks.3.norm1", "blocks.5.norm1"]
    assert paths[-1] == resolve_layer(vit, default_layer_paths(vit, "test_vit", TIMM)[0]).name
    assert [len(every_kth(n)) for n in (2, 6, 8, 12, 24, 32)] == [2, 3, 4, 4, 4, 4] and every_kth(12)[-1] == 11


def test_stages_of_a_torchvision_model_come_from_the_family_table() -> None:
    from gradcam_cli.layers.stages import stage_paths
    from gradcam_cli.model.torchvision_hub import TORCHVISION

    assert stage_paths(tv_resnet18(), "resnet18", TORCHVISION) == ["layer1", "layer2", "layer3", "layer4"]


def test_a_model_no_hub_knows_gets_the_probe_forward_rule() -> None:
    from gradcam_cli.layers.stages import stage_paths

    assert stage_paths(SmallCnn().eval()) == ["act1", "act2"]  # 16x16 after conv1, 8x8 after conv2


def test_a_feature_info_name_that_is_no_module_is_left_out_with_a_notice() -> None:
    import copy

    from gradcam_cli.layers.stages import stage_paths
    from gradcam_cli.model.timm_hub import TIMM

    model = copy.deepcopy(shared_timm_model("test_resnet"))
    model.feature_info = [*model.feature_info[:2], {"module": "block.2", "reduction": 8}, *model.feature_info[2:]]
    said: list[str] = []
    assert stage_paths(model, "test_resnet", TIMM, notice=said.append) == ["act1", "layer1", "layer2", "layer3", "layer4"]
    assert len(said) == 1 and "block.2" in said[0]


def test_the_probe_finds_the_stages_inside_a_featurizer_that_pools() -> None:
    """DomainBed's shape: nn.Sequential(Featurizer, Linear), the backbone held as `.network` and pooled to a vector, so
    neither the featurizer nor its backbone outputs a map; the maps inside them are the stages, however deep."""
    import torch
    from torch import nn

    from gradcam_cli.layers.stages import probed_stages

    class Featurizer(nn.Module):
        def __init__(self, network: nn.Module) -> None:
            super().__init__()
            self.network = network

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.network(x)

    resnet = tv_resnet18()
    resnet.fc = nn.Identity()
    assert probed_stages(nn.Sequential(Featurizer(resnet), nn.Linear(512, 3)).eval()) == [
        f"0.network.{name}" for name in ("relu", "layer1", "layer2", "layer3", "layer4")
    ]
    r = resnet  # its modules again, as one Sequential body that pools and flattens
    body = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3, r.layer4, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    assert probed_stages(nn.Sequential(Featurizer(body), nn.Linear(512, 3)).eval()) == [f"0.network.{i}" for i in (2, 4, 5, 6, 7)]
    one_size = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    assert probed_stages(nn.Sequential(Featurizer(one_size), nn.Linear(4, 2)).eval()) == ["0.network.2"]  # maps at one size: one stage
    squeeze = tv_squeezenet()  # a head that makes a map at the last stage's size and pools it is no stage of its own
    assert probed_stages(squeeze)[-1] == "features.12"


def tv_squeezenet() -> Any:
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.squeezenet1_1(weights=None).eval()


# ---------------------------------------------------------------- the command


def _cli(*args: object) -> CliResult:
    """`gradcam ARGS` in this process, for module-scoped fixtures (conftest's run_cli is per test)."""
    from gradcam_cli.cli.app import main
    from gradcam_cli.cli.console import Streams

    out, err = io.StringIO(), io.StringIO()
    try:
        main([str(a) for a in args], streams=Streams(io.StringIO(), out, err))
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[CliResult, Path]:
    """One comparison of the shipped star with the example model: 2 layers x 2 methods, and a missing image."""
    import torch

    out = tmp_path_factory.mktemp("compare")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = _cli(
            "compare", STAR, out / "missing.jpg", *MODEL, "--methods", "gradcam,gradcam++", "--layers", "layer3,layer4", "-o", out, "--json"
        )
    finally:
        torch.set_num_threads(threads)
    return result, out


def test_compare_writes_one_grid_and_one_record_per_image(compared) -> None:
    result, out = compared
    assert result.code == 1  # the missing image failed; the star was done
    good, bad = result.records()
    assert good["ok"] and good["input"] == str(STAR) and good["class_name"] == "star" and 0 < good["probability"] <= 1
    assert good["rows"] == ["layer3", "layer4"] and good["columns"] == ["gradcam", "gradcam++"]
    mirrored = Path(good["output"]).relative_to(out).parts  # explain's rule: the input's path under the folder, `.compare.png`
    assert mirrored[-3:] == ("examples", "shapes_images", "star_1.jpg.compare.png")
    assert [(c["row"], c["col"], c["layer"], c["method"]) for c in good["cells"]] == [
        (0, 0, "layer3", "gradcam"), (0, 1, "layer3", "gradcam++"), (1, 0, "layer4", "gradcam"), (1, 1, "layer4", "gradcam++"),
    ]  # fmt: skip
    assert not bad["ok"] and "missing.jpg" in bad["error"] and not bad["cells"]
    errors = [line for line in result.stderr.splitlines() if "missing.jpg" in line]
    assert len(errors) == 1 and errors[0].startswith("gradcam: ")  # as explain says a failed image beside its record
    photo = np.asarray(Image.open(STAR).convert("RGB"))
    written = np.asarray(Image.open(good["output"]))
    header = f"star  p={good['probability']:.2f}  ·  test_resnet"
    notes = [f"{h}x{w}" for h, w in good["resolutions"]]
    dry = draw_grid(photo, [[photo] * 2] * 2, rows=good["rows"], columns=good["columns"], header=header, notes=notes)
    assert written.shape == dry.picture.shape  # the size the grid's layout gives
    assert [c["box"] for c in good["cells"]] == [list(box) for row in dry.cells for box in row]
    assert all(c["box"][2:] == list(cell_size(photo.shape[:2])) for c in good["cells"])
    x, y, w, h = dry.input
    assert np.array_equal(written[y : y + h, x : x + w], fit_cell(photo, (w, h)))  # the original in the first cell
    ink = _ink(written)
    for box in [dry.header, dry.input_label, *dry.column_labels, *dry.row_labels]:
        assert ink[box[1] : box[1] + box[3], box[0] : box[0] + box[2]].any(), f"a label is missing at {box}"
    x, y, w, h = dry.bar
    assert np.array_equal(written[y : y + h, x : x + w], dry.picture[y : y + h, x : x + w])  # jet's colour scale in the header
    assert np.array_equal(written[: dry.cells[0][0][1]], dry.picture[: dry.cells[0][0][1]])  # the header and labels as drawn
    assert good["resolutions"] == [[h, w] for h, w in _layer_sizes(["layer3", "layer4"])]  # each row's map, measured here


def _layer_sizes(layers: list[str]) -> list[tuple[int, int]]:
    """The example model's maps at these layers, at its input size, by forward hooks of our own."""
    import gradcam_cli
    import torch

    ready = gradcam_cli.load_model("test_resnet", weights=MODEL[4], labels=MODEL[6], pretrained=False, device="cpu")
    sizes: dict[str, tuple[int, int]] = {}
    modules = dict(ready.model.named_modules())

    def keep(name: str) -> Any:
        def hook(_module: Any, _inputs: Any, out: Any) -> None:
            sizes[name] = tuple(out.shape[-2:])

        return hook

    handles = [modules[name].register_forward_hook(keep(name)) for name in layers]
    with torch.no_grad():
        ready.model(torch.zeros(1, 3, *ready.data_config.input_hw))
    for handle in handles:
        handle.remove()
    return [sizes[name] for name in layers]


def test_each_cell_is_the_overlay_explain_gives_for_its_method_and_layer(compared) -> None:
    import gradcam_cli

    result, _ = compared
    record = result.records()[0]
    written = np.asarray(Image.open(record["output"])).astype(int)
    model = gradcam_cli.load_model("test_resnet", weights=MODEL[4], labels=MODEL[6], pretrained=False, device="cpu")
    centres = []
    for cell in record["cells"]:
        x, y, w, h = cell["box"]
        overlay = np.asarray(gradcam_cli.explain(STAR, model, layers=cell["layer"], method=cell["method"]).overlay)
        expected = fit_cell(overlay, (w, h)).astype(int)
        cy, cx = h // 2, w // 2
        patch = (slice(cy - 4, cy + 5), slice(cx - 4, cx + 5))  # 9 x 9 pixels at the cell's centre
        assert np.abs(written[y : y + h, x : x + w][patch] - expected[patch]).max() <= TOLERANCE, cell
        assert np.abs(written[y : y + h, x : x + w] - expected).mean() < 0.5, cell  # and the whole cell, on average
        centres.append(expected)
    differ = [np.abs(a - b).mean() for i, a in enumerate(centres) for b in centres[i + 1 :]]
    assert min(differ) > 1  # any two cells differ by more than the mean allowed above: a swapped cell would fail


@pytest.mark.parametrize("model, expected", [
    ("test_resnet", ["act1", "layer1", "layer2", "layer3", "layer4"]),
    ("torchvision:resnet18", ["layer1", "layer2", "layer3", "layer4"]),
])  # fmt: skip
def test_layers_stages_gives_one_row_per_stage(run_cli, tmp_path: Path, model: str, expected: list[str]) -> None:
    result = run_cli("compare", STAR, "-m", model, "--no-pretrained", "--layers", "stages", "-o", tmp_path / "o", "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["rows"] == expected and record["columns"] == ["gradcam"]
    assert [cell["layer"] for cell in record["cells"]] == expected
    assert Image.open(record["output"]).size[1] > len(expected) * cell_size((260, 400))[1]


def test_human_lines_without_json(run_cli, tmp_path: Path) -> None:
    result = run_cli("compare", STAR, *MODEL, "--layers", "layer4", "--methods", "gradcam", "-o", tmp_path / "o", "--no-json")
    assert result.code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"✓ {STAR} → ") and "star_1.jpg.compare.png  class 3 star p=" in line and "1x1 (layers x methods)" in line
    assert "compared 1 of 1 images" in result.stderr


@pytest.mark.parametrize("args, message", [
    (("--methods", "gradcam,gradcamm"), "--methods 'gradcamm' is unknown; use some of gradcam, hirescam"),
    (("--methods", "gradcam,"), "--methods '' is unknown"),
    (("--layers", "layer3,layer9"), "layer 'layer9' not found in test_resnet"),
    (("--layers", "layer3,,layer4"), "--layers 'layer3,,layer4' has an empty path"),
    (("--class", "1", "--class", "2"), "a comparison explains one class"),
])  # fmt: skip
def test_a_bad_method_or_layer_is_one_line_and_exit_2_before_any_work(run_cli, tmp_path: Path, args, message) -> None:
    result = run_cli("compare", STAR, "-m", "test_resnet", "--no-pretrained", *args, "-o", tmp_path / "o")
    assert result.code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("gradcam: error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert result.stdout == "" and not list((tmp_path / "o").rglob("*.png"))


def test_a_did_you_mean_for_a_method() -> None:
    from gradcam_cli.cli.compare import parse_layers, parse_methods
    from gradcam_cli.errors import UsageError

    with pytest.raises(UsageError, match=r"did you mean 'gradcam\+\+'"):
        parse_methods("gradcam+")
    assert parse_methods(" GradCAM , scorecam,gradcam") == ["gradcam", "scorecam"]
    assert parse_layers("Stages") is None and parse_layers("layer4, layer3,layer4") == ["layer4", "layer3"]


# ---------------------------------------------------------------- issue 21: a network of your own, names, run files, console

NET = """
import warnings

import torch
import torchvision
from torch import nn


class Featurizer(nn.Module):  # DomainBed's: a torchvision ResNet as `.network`, pooled to a vector
    def __init__(self, sequential=False):
        super().__init__()
        r = torchvision.models.resnet18(weights=None)
        r.fc = nn.Identity()
        body = (r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3, r.layer4, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.network = nn.Sequential(*body) if sequential else r

    def forward(self, x):
        warnings.warn("the featurizer\\nwarns on every forward")
        return self.network(x)


def build(num_classes=3):
    torch.manual_seed(0)
    return nn.Sequential(Featurizer(), nn.Linear(512, num_classes))


def sequential(num_classes=3):
    torch.manual_seed(0)
    return nn.Sequential(Featurizer(sequential=True), nn.Linear(512, num_classes))


def fixed(num_classes=3):  # runs only at 64x64: its classifier takes the flattened 16x16 map
    torch.manual_seed(0)
    convs = (nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
    return nn.Sequential(*convs, nn.Flatten(), nn.Linear(8 * 16 * 16, num_classes))


def flat():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 2))
"""


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """net.py and a photo in the current folder, as a user has them."""
    from conftest import write_image

    (tmp_path / "net.py").write_text(NET)
    write_image(tmp_path / "photo.png", 96, 64)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("builder, stages", [
    ("build", [f"0.network.{name}" for name in ("relu", "layer1", "layer2", "layer3", "layer4")]),
    ("sequential", [f"0.network.{i}" for i in (2, 4, 5, 6, 7)]),
])  # fmt: skip
def test_stages_of_a_domainbed_network_and_its_warnings_as_lines(run_cli, code: Path, builder: str, stages: list[str]) -> None:
    result = run_cli("compare", "photo.png", "-m", f"net.py:{builder}", "--input-size", "64", "-o", "out", "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["rows"] == stages and record["resolutions"] == [[32, 32], [16, 16], [8, 8], [4, 4], [2, 2]]
    lines = result.stderr.splitlines()
    assert all(line.startswith("gradcam: ") for line in lines), result.stderr  # no `net.py:14: UserWarning` and source line
    said = [line for line in lines if "the featurizer warns on every forward" in line]
    assert said == ["gradcam: UserWarning: the featurizer warns on every forward"]  # one line, said once, as every command says it
    assert sum("comes with no preprocessing" in line for line in lines) == 1  # the model's notice once, in flags
    assert "--input-size, --mean" in result.stderr


def test_compare_takes_every_model_option_of_the_table(run_cli, code: Path) -> None:
    """--input-size and --model-kwargs reach a network of your own that needs them; every model row of the table is a flag."""
    import typer

    from gradcam_cli.cli.app import app
    from gradcam_cli.option_table import OPTIONS

    command = typer.main.get_command(app).commands["compare"]  # type: ignore[attr-defined]
    taken = {param.name for param in command.params}
    assert {option.name for option in OPTIONS if option.group == "model"} <= taken
    result = run_cli(
        "compare", "photo.png", "-m", "net.py:fixed", "--model-kwargs", "num_classes=5", "--input-size", "64", "--mean", "0.5",
        "--std", "0.5", "--class", "4", "-o", "out", "--json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["class_index"] == 4  # 5 classes
    assert record["rows"] == ["1", "3"] and record["resolutions"] == [[32, 32], [16, 16]]  # stages probed at 64x64, as it runs
    assert "comes with no preprocessing" not in result.stderr


def test_messages_name_compares_own_flags(run_cli, code: Path) -> None:
    result = run_cli("compare", "photo.png", "-m", "net.py:flat", "--input-size", "64", "-o", "out")
    assert result.code == 2
    assert result.stderr.splitlines()[-1].endswith("no stages to sweep; name the layers with --layers"), result.stderr


def test_grids_mirror_the_inputs_paths_and_are_never_read_back(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    for folder, image in (("a", "star_1.jpg"), ("b", "star_2.jpg")):  # two inputs named alike, in two folders
        (tmp_path / "photos" / folder).mkdir(parents=True)
        shutil.copy(SHAPES / image, tmp_path / "photos" / folder / "star.jpg")
    monkeypatch.chdir(tmp_path)
    result = run_cli("compare", "photos", "-r", *MODEL, "--layers", "layer4", "-o", "out", "--json")
    assert result.code == 0, result.stderr
    assert [r["output"] for r in result.records()] == ["out/photos/a/star.jpg.compare.png", "out/photos/b/star.jpg.compare.png"]
    a, b = (np.asarray(Image.open(tmp_path / r["output"])) for r in result.records())
    assert a.shape != b.shape or not np.array_equal(a, b)  # two grids, neither overwritten by the other
    monkeypatch.chdir(tmp_path / "photos" / "a")
    for _ in range(2):  # the second run finds the first one's grid beside the photo: it is no input
        again = run_cli("compare", ".", *MODEL, "--layers", "layer4", "-o", ".", "--json")
        assert again.code == 0, again.stderr
        assert [r["input"] for r in again.records()] == ["star.jpg"]
    assert sorted(p.name for p in Path(".").glob("*.png")) == ["star.jpg.compare.png"]
    assert "star.jpg.compare.png and other gradcam outputs" in again.stderr


def test_the_output_folder_keeps_the_records_and_the_run(compared) -> None:
    import json

    result, out = compared
    assert (out / "records.jsonl").read_text().splitlines() == result.stdout.splitlines()  # as explain's and eval's
    start, end = (json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines())
    assert start["id"] == end["id"] and start["command"].startswith("gradcam compare ") and start["model"] == "test_resnet"
    assert start["method"] == "gradcam,gradcam++" and start["layers"] == ["layer3", "layer4"]
    assert end["interrupted"] is False and end["counts"] == {"total": 2, "done": 1, "failed": 1}
    report = _cli("report", out)
    assert report.code == 0, report.stderr
    assert "star_1.jpg.compare.png" in (out / "report" / "data.js").read_text()  # the report links the grid


def test_progress_and_the_cost_of_masked_forwards_on_stderr(tmp_path: Path) -> None:
    from gradcam_cli.cli.app import main
    from gradcam_cli.cli.console import Streams

    out, err = io.StringIO(), io.StringIO()
    streams = Streams(io.StringIO(), out, err, stdout_is_terminal=False, stderr_is_terminal=True)
    args = ["compare", str(STAR), *map(str, MODEL), "--methods", "gradcam,scorecam", "--layers", "layer4", "-o", str(tmp_path), "--json"]
    with pytest.raises(SystemExit) as exit_:
        main(args, streams)
    assert exit_.value.code == 0, err.getvalue()
    said = err.getvalue()
    assert "\x1b[" in said and "compared 1" in said  # rich drew its line on the "terminal"
    cost = [line for line in said.splitlines() if "masked forwards per image" in line]
    assert len(cost) == 1 and "scorecam runs " in cost[0] and "(layer4: " in cost[0], said
    assert "--methods gradcam" in cost[0] and "--layers" in cost[0] and "--method " not in cost[0]  # compare's own flags
    assert "compared 1 of 1 images" in said


def test_raw_maps_say_their_range_and_the_scale_says_raw(run_cli, tmp_path: Path) -> None:
    """--norm none: each cell's record has its map's raw range; the header's scale is the --colormap's, labelled min to max."""
    import gradcam_cli
    from gradcam_cli.outputs.legend import EACH_RAW
    from gradcam_cli.vocab import Colormap

    result = run_cli("compare", STAR, *MODEL, "--layers", "layer4", "--norm", "none", "--colormap", "viridis", "-o", tmp_path, "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    (cell,) = record["cells"]
    model = gradcam_cli.load_model("test_resnet", weights=MODEL[4], labels=MODEL[6], pretrained=False, device="cpu")
    raw = gradcam_cli.explain(STAR, model, layers="layer4", norm="none").targets[0].raw
    assert cell["range"] == pytest.approx([float(raw.min()), float(raw.max())], abs=1e-6) and cell["range"][1] > 1  # raw, not 0-1
    photo = np.asarray(Image.open(STAR).convert("RGB"))
    header = f"star  p={record['probability']:.2f}  ·  test_resnet"
    notes = [f"{h}x{w}" for h, w in record["resolutions"]]
    dry = draw_grid(photo, [[photo]], rows=["layer4"], columns=["gradcam"], header=header, notes=notes, scale=EACH_RAW,
                    colormap=Colormap.viridis)  # fmt: skip
    written = np.asarray(Image.open(record["output"]))
    x, y, w, h = dry.legend
    assert np.array_equal(written[y : y + h, x : x + w], dry.picture[y : y + h, x : x + w])  # `raw min ▭ max` in viridis


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_at_the_next_cell_and_keeps_the_grids_written(tmp_path: Path, signum: int, code: int) -> None:
    import json
    import shutil
    import signal
    import subprocess

    from conftest import cli_command, cli_env

    folder = tmp_path / "many"
    folder.mkdir()
    for copy in range(3):
        for image in sorted(SHAPES.glob("*.jpg")):
            shutil.copy(image, folder / f"{copy}_{image.name}")
    command = cli_command("compare", folder, *MODEL, "--methods", "gradcam,layercam", "-o", tmp_path / "out", "--json")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    assert process.stdout is not None
    try:
        first = process.stdout.readline()  # one grid written: the run is under way
        process.send_signal(signal.Signals(signum))
        rest, stderr = process.communicate(timeout=120)
    finally:
        process.kill()  # a hung run must not outlive the test
    records = [json.loads(line) for line in [first, *rest.splitlines()] if line.strip()]
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr and 1 <= len(records) < 24
    name = "Ctrl-C" if signum == 2 else "SIGTERM"
    last = stderr.splitlines()[-1]
    assert last == f"gradcam: interrupted by {name}; every file written is complete; {len(records)} of 24 images compared, their grids kept"
    grids = sorted((tmp_path / "out").rglob("*.png"))
    assert [Path(r["output"]).name for r in records] == [p.name for p in grids]  # each finished grid kept, no other
    for grid in grids:
        with Image.open(grid) as picture:
            picture.load()  # whole
    assert not list((tmp_path / "out").rglob(".*")), "no temporary file is left"
    assert (tmp_path / "out" / "records.jsonl").read_text().splitlines() == [first.strip(), *rest.splitlines()]
    end = json.loads((tmp_path / "out" / "runs.jsonl").read_text().splitlines()[-1])
    assert end["interrupted"] is True and end["counts"]["done"] == len(records)
