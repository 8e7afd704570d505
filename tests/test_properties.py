"""Property tests (hypothesis): layer paths, preprocessing geometry, image decoding.

- Layer paths: on random module trees, a random valid path (names, positive and
  negative indices) resolves to exactly the module reached by walking the tree by
  hand; a random invalid path (unknown name, out-of-range index, empty segment,
  a token that only Python's int() would call a number) is a LayerError, never an
  IndexError/KeyError/AttributeError/ValueError.
- Geometry: original -> model input -> original is the identity within a pixel,
  for the whole-image resize and the centre crop, for any size 1..5000.
- Decoding: any small image of any mode in PNG/TIFF/GIF/JPEG decodes to uint8
  (H, W, 3); arbitrary bytes named .png/.jpg give an InputError or an image, nothing else.
"""

from __future__ import annotations

import io
import math
import string
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------ layer paths


def _free_name(name: str) -> bool:
    from torch import nn

    return not hasattr(nn.ModuleDict, name)  # "cuda", "train", ... are methods, not child names


NAME = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=6).filter(_free_name)


def _leaf() -> st.SearchStrategy:
    return st.sampled_from(["identity", "relu", "linear"])


TREE = st.recursive(
    _leaf(),
    lambda children: st.one_of(
        st.tuples(st.just("seq"), st.lists(children, min_size=0, max_size=4)),
        st.tuples(st.just("list"), st.lists(children, min_size=0, max_size=4)),
        st.tuples(st.just("dict"), st.dictionaries(NAME, children, min_size=0, max_size=4)),
    ),
    max_leaves=14,
)


def build(spec):
    """A spec from TREE -> an nn.Module (containers: Sequential, ModuleList, ModuleDict)."""
    from torch import nn

    if isinstance(spec, str):
        return {"identity": nn.Identity, "relu": nn.ReLU, "linear": lambda: nn.Linear(2, 2)}[spec]()
    kind, content = spec
    if kind == "seq":
        return nn.Sequential(*[build(c) for c in content])
    if kind == "list":
        return nn.ModuleList([build(c) for c in content])
    return nn.ModuleDict({name: build(c) for name, c in content.items()})


def children_of(module) -> list[tuple[str, object]]:
    return list(module._modules.items())  # the hand walk: the module's own registry, in order


@st.composite
def model_and_walk(draw):
    """A random tree and a random walk down it: (model, [(child index, child name, module)])."""
    model = build(draw(TREE))
    module, walk = model, []
    while children_of(module) and draw(st.booleans() if walk else st.just(True)):
        kids = children_of(module)
        index = draw(st.integers(0, len(kids) - 1))
        name, child = kids[index]
        walk.append((index, len(kids), name, child, module))
        module = child
    return model, walk


def _token(draw, index: int, count: int, name: str, parent) -> str:
    names = [n for n, _ in children_of(parent)]
    choices = [name, str(index - count)]  # the name, or the negative index
    if str(index) not in names or names.index(str(index)) == index:
        choices.append(str(index))  # a positive index, unless it is another child's name
    return draw(st.sampled_from(choices))


@SETTINGS
@given(data=st.data())
@pytest.mark.slow
def test_valid_path_resolves_to_the_module_reached_by_hand(data):
    from gradcam_cli.layers.paths import resolve_layer

    model, walk = data.draw(model_and_walk())
    assume(walk)
    tokens = [_token(data.draw, index, count, name, parent) for index, count, name, _, parent in walk]
    path = ".".join(tokens)
    resolved = resolve_layer(model, path, "tree")
    assert resolved.module is walk[-1][3]
    assert resolved.name == ".".join(name for _, _, name, _, _ in walk)
    assert dict(model.named_modules())[resolved.name] is resolved.module


def _bad_token(draw, parent) -> str:
    names = [n for n, _ in children_of(parent)]
    count = len(names)
    kind = draw(st.sampled_from(["unknown", "too_big", "too_small", "empty", "not_a_plain_int"]))
    if kind == "unknown":
        token = draw(st.text(alphabet=string.ascii_letters + "_", min_size=1, max_size=8))
        assume(token not in names)
        return token
    if kind == "too_big":
        return str(count + draw(st.integers(0, 10**30)))
    if kind == "too_small":
        return str(-count - 1 - draw(st.integers(0, 10**30)))
    if kind == "empty":
        return ""
    # int() accepts these, but nobody types them as an index: " 1", "1_0", "+0", "١" (Arabic-Indic one)
    token = draw(st.sampled_from([" 0", "0 ", "\t1", "0_0", "1_0", "+0", "+1", "١", "٠", "0\n"]))
    assume(token not in names)
    return token


@SETTINGS
@given(data=st.data())
@pytest.mark.slow
def test_invalid_path_is_a_layer_error_naming_the_bad_step(data):
    from gradcam_cli.errors import GradcamError, LayerError, UsageError
    from gradcam_cli.layers.paths import resolve_layer

    model, walk = data.draw(model_and_walk())
    keep = data.draw(st.integers(0, len(walk)))
    walk = walk[:keep]
    prefix = [_token(data.draw, index, count, name, parent) for index, count, name, _, parent in walk]
    parent = walk[-1][3] if walk else model
    bad = _bad_token(data.draw, parent)
    rest = data.draw(st.lists(st.sampled_from(["0", "-1", "a", "x"]), max_size=2))
    path = ".".join(prefix + [bad] + rest)
    assume(path.strip() not in ("", "."))  # these name the model itself
    assume(not (path.strip() == "model" and "model" not in model._modules))  # so does "model", unless a child is called so
    assume(path == path.strip())  # documented: the whole path is stripped, so " 0" alone is "0"
    try:
        resolve_layer(model, path, "tree")
    except (LayerError, UsageError) as error:
        message = str(error)
        assert "\n" not in message and "tree" in message
    except GradcamError as error:  # pragma: no cover - a wrong kind of project error
        pytest.fail(f"{path!r}: {type(error).__name__}: {error}")
    else:
        pytest.fail(f"{path!r} resolved, but its step {bad!r} is not a child of {type(parent).__name__}")


def test_a_name_wins_over_an_index_and_plain_ints_only():
    """Examples behind the properties: ModuleDict keys that look like numbers, int() quirks."""
    from torch import nn

    from gradcam_cli.errors import LayerError
    from gradcam_cli.layers.paths import resolve_layer

    a, b, c = nn.ReLU(), nn.Identity(), nn.Tanh()
    model = nn.ModuleDict({"1": a, "0": b, "x": c})
    assert resolve_layer(model, "1").module is a  # the name "1", not index 1
    assert resolve_layer(model, "-1").module is c
    assert resolve_layer(model, "2").module is c
    for path in ("x. 0", "+1", "0_1", "١", "x..0", ".x", "x."):
        with pytest.raises(LayerError):
            resolve_layer(model, path)
    with pytest.raises(LayerError) as error:
        resolve_layer(model, "x\n.0")
    assert "\n" not in str(error.value) and "x\\n" in str(error.value)  # escaped, one line

    wrapper = nn.ModuleDict({"model": nn.Sequential(a, b), "head": c})  # a wrapper keeping `self.model`
    assert resolve_layer(wrapper, "model").module is wrapper["model"]
    plain = nn.Sequential(a)
    assert resolve_layer(plain, "model").module is plain  # no such child: the root itself


# ------------------------------------------------------------------ geometry

SIDE = st.integers(1, 5000)


@st.composite
def data_configs(draw):
    from gradcam_cli.model.data_config import DataConfig

    side = draw(st.integers(8, 512))
    input_hw = (side, side) if draw(st.booleans()) else (draw(st.integers(8, 512)), side)
    return DataConfig(
        input_hw=input_hw,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        interpolation=draw(st.sampled_from(["bilinear", "bicubic", "nearest"])),
        crop_pct=draw(st.floats(0.5, 1.0)),
        crop_mode=draw(st.sampled_from(["center", "squash"])),
    )


def to_original(geometry, u: float, v: float) -> tuple[float, float]:
    """Input pixel centre (u=column, v=row) → original pixel coordinates, from the geometry's box."""
    x0, y0, x1, y1 = geometry.box
    h, w = geometry.input_hw
    return x0 + (u + 0.5) * (x1 - x0) / w - 0.5, y0 + (v + 0.5) * (y1 - y0) / h - 0.5


def to_input(geometry, x: float, y: float) -> tuple[float, float]:
    """Original pixel (x, y) → input pixel coordinates; the inverse of to_original."""
    x0, y0, x1, y1 = geometry.box
    h, w = geometry.input_hw
    return (x + 0.5 - x0) * w / (x1 - x0) - 0.5, (y + 0.5 - y0) * h / (y1 - y0) - 0.5


@SETTINGS
@given(height=SIDE, width=SIDE, config=data_configs(), crop=st.booleans(), fx=st.floats(0, 1), fy=st.floats(0, 1))
def test_original_to_input_and_back_is_within_a_pixel(height, width, config, crop, fx, fy):
    from gradcam_cli.geometry import plan_geometry

    geometry = plan_geometry((height, width), config, crop=crop)
    in_h, in_w = config.input_hw
    assert geometry.input_hw == (in_h, in_w)
    x0, y0, x1, y1 = geometry.box
    eps = 1e-6 * max(height, width)
    assert -eps <= x0 < x1 <= width + eps and -eps <= y0 < y1 <= height + eps, geometry
    if not crop:
        assert geometry.box == (0.0, 0.0, float(width), float(height))

    # a point inside the crop box (the whole image without --crop), in pixel coordinates (centres at 0..n-1)
    x = x0 + fx * (x1 - x0) - 0.5
    y = y0 + fy * (y1 - y0) - 0.5
    u, v = to_input(geometry, x, y)
    assert -0.5 - 1e-6 <= u <= in_w - 0.5 + 1e-6 and -0.5 - 1e-6 <= v <= in_h - 0.5 + 1e-6
    back_x, back_y = to_original(geometry, u, v)
    assert abs(back_x - x) < 1 and abs(back_y - y) < 1
    assert math.isclose(back_x, x, abs_tol=1e-6 * max(1, width)) and math.isclose(back_y, y, abs_tol=1e-6 * max(1, height))

    # and an input pixel centre -> original -> input
    u, v = fx * (in_w - 1), fy * (in_h - 1)
    back_u, back_v = to_input(geometry, *to_original(geometry, u, v))
    assert abs(back_u - u) < 1e-6 * in_w + 1e-9 and abs(back_v - v) < 1e-6 * in_h + 1e-9


@SETTINGS
@given(
    height=st.integers(1, 300), width=st.integers(1, 300), config=data_configs(), crop=st.booleans(), fx=st.floats(0, 1), fy=st.floats(0, 1)
)
def test_a_hot_input_pixel_lands_where_to_original_says(height, width, config, crop, fx, fy):
    """map_to_original agrees with the box's to_original: a delta at input (u, v) peaks near to_original(u, v)."""
    import torch

    from gradcam_cli.geometry import map_to_original, plan_geometry

    in_h, in_w = config.input_hw
    geometry = plan_geometry((height, width), config, crop=crop)
    u, v = round(fx * (in_w - 1)), round(fy * (in_h - 1))
    cam = torch.zeros(in_h, in_w)
    cam[v, u] = 1.0
    mapped = map_to_original(cam, geometry)
    assert mapped.shape == (height, width) and mapped.dtype == np.float32
    assert np.isfinite(mapped).all() and mapped.min() >= 0 and mapped.max() <= 1
    if mapped.max() == 0:  # a sub-pixel crop box can fall between the original's pixel centres
        return
    x, y = to_original(geometry, u, v)
    peak_y, peak_x = np.unravel_index(int(np.argmax(mapped)), mapped.shape)
    x0, y0, x1, y1 = geometry.box
    step_x, step_y = (x1 - x0) / in_w, (y1 - y0) / in_h  # original pixels per input pixel
    assert abs(peak_x - min(max(x, 0), width - 1)) <= step_x + 1.5, (peak_x, x, geometry)
    assert abs(peak_y - min(max(y, 0), height - 1)) <= step_y + 1.5, (peak_y, y, geometry)


# ------------------------------------------------------------------ decoding

SAVABLE = {
    "PNG": ["L", "RGB", "RGBA", "LA", "P", "I;16", "1"],
    "TIFF": ["L", "RGB", "RGBA", "LA", "P", "I;16", "1", "CMYK"],
    "GIF": ["L", "RGB", "P", "1"],
    "JPEG": ["L", "RGB", "CMYK"],
}
SUFFIX = {"PNG": ".png", "TIFF": ".tif", "GIF": ".gif", "JPEG": ".jpg"}


def _image(mode: str, array: np.ndarray):
    from PIL import Image

    rgb = Image.fromarray(array, "RGB")
    if mode == "I;16":
        wide = (array[..., 0].astype(np.uint16) * 257 + array[..., 1] % 7).astype("<u2")
        return Image.frombytes("I;16", (array.shape[1], array.shape[0]), wide.tobytes())
    if mode == "P":
        return rgb.convert("P", palette=Image.ADAPTIVE, colors=16)
    if mode in ("RGBA", "LA"):
        image = rgb.convert(mode)
        image.putalpha(Image.fromarray(array[..., 2]))
        return image
    return rgb.convert(mode)


@st.composite
def encoded_images(draw):
    fmt = draw(st.sampled_from(sorted(SAVABLE)))
    mode = draw(st.sampled_from(SAVABLE[fmt]))
    height, width = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    seed = draw(st.integers(0, 2**32 - 1))
    array = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return fmt, mode, array


@SETTINGS
@given(case=encoded_images(), transparency=st.booleans())
def test_every_mode_and_format_decodes_to_uint8_rgb_of_its_size(case, transparency, tmp_path_factory):
    from PIL import Image

    from gradcam_cli.inputs.decode import load_image

    fmt, mode, array = case
    image = _image(mode, array)
    assert image.mode == mode
    params = {"transparency": 0} if transparency and mode == "P" and fmt in ("PNG", "GIF") else {}
    path = tmp_path_factory.mktemp("decode") / f"image{SUFFIX[fmt]}"
    image.save(path, fmt, **params)
    with Image.open(path) as reopened:
        assert reopened.size == image.size
    rgb = load_image(path)
    height, width = array.shape[:2]
    assert rgb.dtype == np.uint8 and rgb.shape == (height, width, 3) and rgb.flags["C_CONTIGUOUS"]
    if fmt in ("PNG", "TIFF") and mode == "RGB":
        assert np.array_equal(rgb, array)
    if fmt in ("PNG", "TIFF") and mode == "L":
        gray = np.asarray(image)
        assert all(np.array_equal(rgb[..., c], gray) for c in range(3))
    if mode == "I;16":
        deep = np.asarray(image).astype(np.int64)
        # 16 bits shown at 8: the order of the levels is kept (a monotone map)
        order = np.argsort(deep, axis=None, kind="stable")
        assert np.all(np.diff(rgb[..., 0].reshape(-1)[order].astype(np.int64)) >= 0)


def _valid_bytes(fmt: str) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(buffer, fmt)
    return buffer.getvalue()


VALID: dict[str, bytes] = {}


@st.composite
def hostile_bytes(draw):
    kind = draw(st.sampled_from(["random", "png_header", "jpeg_header", "mutated", "cut"]))
    if kind == "random":
        return draw(st.binary(max_size=256))
    if kind == "png_header":
        return b"\x89PNG\r\n\x1a\n" + draw(st.binary(max_size=256))
    if kind == "jpeg_header":
        return b"\xff\xd8\xff" + draw(st.binary(max_size=256))
    fmt = draw(st.sampled_from(["PNG", "JPEG"]))
    if fmt not in VALID:
        VALID[fmt] = _valid_bytes(fmt)
    data = VALID[fmt]
    if kind == "cut":
        return data[: draw(st.integers(0, len(data) - 1))]
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(0, len(data) - 1))
        data[position] = draw(st.integers(0, 255))
    return bytes(data)


@SETTINGS
@given(data=hostile_bytes(), suffix=st.sampled_from([".png", ".jpg"]))
def test_arbitrary_bytes_give_an_image_or_an_input_error(data, suffix, tmp_path_factory):
    from gradcam_cli.errors import InputError
    from gradcam_cli.inputs.decode import load_image

    path = tmp_path_factory.mktemp("bytes") / f"file{suffix}"
    path.write_bytes(data)
    try:
        rgb = load_image(path)
    except InputError as error:
        message = str(error)
        assert message.startswith(str(path)) and "\n" not in message.strip(), message
    else:
        assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3 and min(rgb.shape[:2]) >= 1


def test_names_of_the_error_kinds_in_the_messages():
    """The checks above rely on single-line messages; also pin the empty/HTML/text wording."""
    import tempfile

    from gradcam_cli.errors import InputError
    from gradcam_cli.inputs.decode import load_image

    with tempfile.TemporaryDirectory() as folder:
        cases = {
            "e.png": (b"", r"empty file"),
            "h.jpg": (b"\n<html><p>x</p></html>", r"HTML page"),
            "t.png": (b"hello\n", r"text file"),
            "b.jpg": (bytes(range(256)), r"not an image file"),
        }
        for name, (content, pattern) in cases.items():
            path = Path(folder) / name
            path.write_bytes(content)
            with pytest.raises(InputError, match=pattern):
                load_image(path)
