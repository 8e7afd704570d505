"""Pictures people can read: --style overlay|side-by-side|contour and --caption (issue 11, part 3)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from conftest import write_image
from gradcam_cli.outputs.picture import CONTOUR_LEVELS, captioned, contour, draw, picture
from gradcam_cli.outputs.text import fitted, font
from gradcam_cli.outputs.render import colorize, overlay
from gradcam_cli.vocab import Colormap, Style


def _photo(height: int = 120, width: int = 180, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _radial(height: int = 120, width: int = 180) -> np.ndarray:
    """1 at the centre, falling linearly to 0 at distance 50 px: each contour level is a circle of known radius."""
    y, x = np.mgrid[:height, :width]
    distance = np.hypot(y - height / 2, x - width / 2)
    return np.clip(1.0 - distance / 50.0, 0.0, 1.0).astype(np.float32), distance


def test_overlay_is_the_default_and_unchanged() -> None:
    photo, (shown, _) = _photo(), _radial()
    assert np.array_equal(picture(photo, shown), overlay(photo, shown, Colormap.jet, 0.5))
    assert np.array_equal(draw(photo, shown), overlay(photo, shown, Colormap.jet, 0.5))  # no caption: nothing added


def test_side_by_side_keeps_the_photo_untouched_beside_the_map() -> None:
    photo, (shown, _) = _photo(), _radial()
    drawn = picture(photo, shown, style=Style.side_by_side, colormap=Colormap.turbo)
    height, width = photo.shape[:2]
    assert drawn.shape[0] == height and drawn.dtype == np.uint8
    assert np.array_equal(drawn[:, :width], photo)  # the original, exactly
    assert np.array_equal(drawn[:, -width:], colorize(shown, Colormap.turbo))  # the map alone, same colours
    assert (drawn[:, width:-width] == 255).all() and drawn.shape[1] > 2 * width  # a white gap between them


def test_contour_draws_iso_lines_at_the_levels_and_leaves_the_rest_of_the_photo_untouched() -> None:
    photo, (shown, distance) = _photo(), _radial()
    drawn = contour(photo, shown)
    changed = (drawn != photo).any(axis=2)
    radii = [50.0 * (1.0 - level) for level in CONTOUR_LEVELS]  # where 1 - d/50 == level
    near = np.zeros_like(changed)
    for radius in radii:
        near |= np.abs(distance - radius) <= 2.5  # line thickness 1 px at this size, anti-aliased over ~2 px
    assert not (changed & ~near).any(), "pixels away from every iso-line must be the photo's own"
    height, width = shown.shape
    for radius in radii:  # every level is drawn all round its circle: each direction crosses its line
        for angle in np.radians(np.arange(0, 360, 3)):
            steps = radius + np.arange(-2.0, 2.5, 0.5)
            ys = np.round(height / 2 + steps * np.sin(angle)).astype(int)
            xs = np.round(width / 2 + steps * np.cos(angle)).astype(int)
            assert changed[ys, xs].any(), (radius, np.degrees(angle))


def test_contour_draws_no_line_along_the_border_of_the_picture() -> None:
    """A region that reaches the edge is cut by the border, which is no iso-line of the map."""
    photo = _photo()
    shown = np.zeros(photo.shape[:2], np.float32)
    shown[:, :60] = 1.0  # evidence along the whole left edge
    drawn = contour(photo, shown)
    border = np.zeros(shown.shape, bool)
    border[[0, -1], :] = border[:, [0, -1]] = True
    border[:, 55:65] = False  # where the real iso-line (x = 60) meets the top and bottom edges
    assert np.array_equal(drawn[border], photo[border])
    assert (drawn[:, 56:64] != photo[:, 56:64]).any(axis=2).any(axis=1)[2:-2].all()  # the line itself, top to bottom


@pytest.mark.parametrize("height, width", [(16, 16), (64, 96), (300, 451), (1600, 1200)])
def test_a_caption_is_a_band_under_the_picture_sized_from_it(height: int, width: int) -> None:
    rgb = _photo(height, width)
    out = captioned(rgb, "tabby, tabby cat  p=0.83  gradcam @ layer4")
    band = out[height:]
    assert np.array_equal(out[:height], rgb)  # the picture itself is untouched
    from gradcam_cli.outputs.legend import BAR_LENGTH, bar_pixels

    bar = _find_bar(band, bar_pixels(Colormap.jet, BAR_LENGTH * _text_px(rgb), 1)[0])
    lines = 2 if bar is not None and bar[1] > _text_px(rgb) else 1  # the colour scale on a line of its own, under the text
    assert out.shape[1] == width and 11 <= band.shape[0] <= lines * max(40, 0.12 * min(height, width))
    text = (band.astype(int).sum(axis=2) > 600).mean()  # white glyph pixels on the dark band
    assert 0.005 < text < 0.6, text


def _text_px(rgb: np.ndarray) -> int:
    from gradcam_cli.outputs.picture import MIN_TEXT_PX, TEXT_FRACTION

    return max(MIN_TEXT_PX, round(min(rgb.shape[:2]) * TEXT_FRACTION))


@pytest.mark.parametrize("height, width", [(120, 180), (300, 451), (1600, 1200)])
@pytest.mark.parametrize("colormap", [Colormap.jet, Colormap.viridis, Colormap.gray])
def test_the_caption_band_holds_the_colour_scale_of_the_colour_map_used(height: int, width: int, colormap: Colormap) -> None:
    from gradcam_cli.outputs.legend import BAR_LENGTH, MINMAX, bar_pixels, raw_scale

    rgb = _photo(height, width)
    size = _text_px(rgb)
    text = "tabby, tabby cat  p=0.83  gradcam @ layer4"
    minmax = captioned(rgb, text, MINMAX, colormap)[height:]
    where = _find_bar(minmax, bar_pixels(colormap, BAR_LENGTH * size, 1)[0])
    assert where is not None, "the colour bar of this colour map, 0 at its left, 1 at its right"
    others = [c for c in (Colormap.jet, Colormap.viridis) if c is not colormap]
    assert _find_bar(minmax, bar_pixels(others[0], BAR_LENGTH * size, 1)[0]) is None  # not another map's colours
    raw = captioned(rgb, text, raw_scale(0.0, 3.21), colormap)[height:]
    assert _find_bar(raw, bar_pixels(colormap, BAR_LENGTH * size, 1)[0]) is not None
    assert not np.array_equal(raw, minmax)  # `raw 0 … 3.21` at the ends, not `low 0 … 1 high`
    assert np.array_equal(captioned(rgb, text)[height:], captioned(rgb, text, MINMAX, Colormap.jet)[height:])  # the default


def test_a_picture_too_narrow_for_the_scale_keeps_its_caption() -> None:
    from gradcam_cli.outputs.legend import BAR_LENGTH, bar_pixels

    rgb = _photo(64, 96)
    band = captioned(rgb, "cat  p=0.83")[64:]
    assert _find_bar(band, bar_pixels(Colormap.jet, BAR_LENGTH * _text_px(rgb), 1)[0]) is None
    assert (band.astype(int).sum(axis=2) > 600).any()  # the caption is there


def _find_bar(band: np.ndarray, row: np.ndarray) -> tuple[int, int] | None:
    """Where (x, y) a row of the bar's colours lies whole in the band, else None."""
    width = len(row)
    for y in range(band.shape[0]):
        line = band[y].astype(int)
        starts = np.flatnonzero((line[: len(line) - width + 1] == row[0]).all(axis=1))
        for x in starts:
            if np.array_equal(line[x : x + width], row):
                return int(x), y
    return None


def test_a_caption_too_long_for_the_picture_is_cut_with_an_ellipsis() -> None:
    from PIL import ImageDraw

    canvas = ImageDraw.Draw(Image.new("RGB", (10, 10)))
    face = font(12)
    text = "a very long class name, with synonyms, and more synonyms  p=0.99  layercam @ stages.3.blocks.2"
    short = fitted(text, face, 120)
    assert short.endswith("…") and text.startswith(short[:-1]) and canvas.textlength(short, font=face) <= 120
    assert fitted("cat", face, 120) == "cat"
    assert fitted(text, face, 2) == "" and fitted(text, face, 2, nothing="…") == "…", "too narrow for one character"


def test_the_cli_writes_the_style_and_the_caption(run_cli, tmp_path) -> None:
    image = write_image(tmp_path / "in.png", width=120, height=80)
    base = ["explain", image, "-m", "test_resnet", "--no-pretrained", "--json"]
    plain = run_cli(*base, "-o", tmp_path / "a")
    styled = run_cli(*base, "--style", "side-by-side", "--caption", "-o", tmp_path / "b")
    assert plain.code == 0 and styled.code == 0, styled.stderr
    a = Image.open(tmp_path / "a" / "in.png.gradcam.png")
    b = Image.open(tmp_path / "b" / "in.png.gradcam.png")
    assert a.size == (120, 80)
    assert b.size[0] > 240 and b.size[1] > 80  # photo, gap, map; the caption band under them
    assert np.array_equal(np.asarray(b)[:80, :120], np.asarray(Image.open(image).convert("RGB")))
    (one,), (two,) = plain.records(), styled.records()
    assert two["settings"]["style"] == "side-by-side" and two["settings"]["caption"] is True and two["stamp"] != one["stamp"]
    for record in (one, two):  # what the picture looks like is said; what was explained does not change
        record.pop("stamp"), record.pop("outputs"), record.pop("input")
        record["targets"] = [{k: v for k, v in target.items() if k != "overlay"} for target in record["targets"]]
        for key in ("style", "caption"):
            record["settings"].pop(key)
    assert one == two


def test_an_unknown_style_is_one_plain_line(run_cli, tmp_path) -> None:
    image = write_image(tmp_path / "in.png")
    result = run_cli("explain", image, "-m", "test_resnet", "--no-pretrained", "--style", "sidebyside", "-o", tmp_path / "o")
    assert result.code == 2
    assert result.stderr == (
        "gradcam: error: --style 'sidebyside' is unknown; use one of overlay, side-by-side, contour (did you mean 'side-by-side'?)\n"
    )


def test_the_api_draws_what_the_cli_writes(run_cli, tmp_path) -> None:
    import gradcam_cli

    image = write_image(tmp_path / "in.png", width=100, height=70)
    result = run_cli(
        "explain", image, "-m", "test_resnet", "--no-pretrained", "--style", "contour", "--caption", "-o", tmp_path / "o", "--json"
    )
    assert result.code == 0, result.stderr
    model = gradcam_cli.load_model("test_resnet", pretrained=False, device="cpu")
    explained = gradcam_cli.explain(image, model, style="contour", caption=True)
    written = np.asarray(Image.open(tmp_path / "o" / "in.png.gradcam.png").convert("RGB"))
    assert np.array_equal(np.asarray(explained.overlay), written)  # the same functions on the same bytes


def test_the_cli_caption_shows_the_colour_map_and_what_its_ends_mean(run_cli, tmp_path) -> None:
    """--caption's band: the --colormap's bar; with --norm none its ends are the map's raw minimum and maximum."""
    import torch

    import gradcam_cli
    from gradcam_cli.outputs.legend import BAR_LENGTH, MINMAX, bar_pixels, display_scale, raw_scale

    image = write_image(tmp_path / "in.png", width=300, height=200)
    base = ["explain", image, "-m", "test_resnet", "--no-pretrained", "--caption", "--colormap", "viridis", "--json"]
    bands = {}
    for norm in ("minmax", "none"):
        result = run_cli(*base, "--norm", norm, "-o", tmp_path / norm)
        assert result.code == 0, result.stderr
        written = np.asarray(Image.open(tmp_path / norm / "in.png.gradcam.png").convert("RGB"))
        bands[norm] = written[200:]
        assert _find_bar(bands[norm], bar_pixels(Colormap.viridis, BAR_LENGTH * _text_px(written[:200]), 1)[0]) is not None
        model = gradcam_cli.load_model("test_resnet", pretrained=False, device="cpu")
        api = gradcam_cli.explain(image, model, caption=True, colormap="viridis", norm=norm)
        assert np.array_equal(np.asarray(api.overlay), written)  # the API draws the same band
    assert not np.array_equal(bands["minmax"], bands["none"])  # `low 0 … 1 high` against `raw … …`
    cam = torch.tensor([[0.25, 3.5], [1.0, -0.5]])
    assert display_scale(cam, raw_norm=False) == MINMAX
    assert display_scale(cam, raw_norm=True) == raw_scale(-0.5, 3.5)
    assert (raw_scale(-0.5, 3.5).low, raw_scale(-0.5, 3.5).high, raw_scale(0.0421234, 1e5).low) == ("-0.5", "3.5", "0.0421")
