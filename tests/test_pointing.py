"""The pointing game (evaluate/pointing.py) and where the objects are (inputs/regions.py): boxes files, mask folders, notices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_pointing_game import _distance_to_box, _shapes

from gradcam_cli.errors import UsageError
from gradcam_cli.evaluate.pointing import POINTING_TOLERANCE_PX, pointing_hit
from gradcam_cli.inputs.regions import Region, RegionTable, load_regions, object_mask

ANY_CLASS = lambda _written: True  # noqa: E731


def peaked(shape: tuple[int, int], x: int, y: int) -> np.ndarray:
    """A map whose one maximum is at (x, y)."""
    saliency = np.zeros(shape, dtype=np.float32)
    saliency[y, x] = 1.0
    return saliency


def box_mask(shape: tuple[int, int], box: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = box
    mask = np.zeros(shape, dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


# ------------------------------------------------------------------ the pointing game


BOX = (40, 30, 60, 50)  # columns 40..59, rows 30..49
SHAPE = (100, 200)


@pytest.mark.parametrize(
    "x,y,hit",
    [
        (50, 40, 1.0),  # inside
        (59 + 15, 40, 1.0),  # exactly 15 px right of the last column
        (59 + 16, 40, 0.0),  # just beyond
        (40 - 15, 40, 1.0),
        (50, 30 - 16, 0.0),
        (59 + 9, 49 + 12, 1.0),  # diagonal, exactly 15 (9² + 12² = 15²)
        (59 + 9, 49 + 13, 0.0),  # 15.8
    ],
)
def test_a_hit_is_within_15_px_of_the_object_and_the_boundary_is_exact(x, y, hit):
    assert POINTING_TOLERANCE_PX == 15
    assert pointing_hit(peaked(SHAPE, x, y), box_mask(SHAPE, BOX)) == hit


def test_the_tolerance_is_a_parameter():
    mask = box_mask(SHAPE, BOX)
    assert pointing_hit(peaked(SHAPE, 60, 40), mask, tolerance_px=0) == 0.0
    assert pointing_hit(peaked(SHAPE, 59, 40), mask, tolerance_px=0) == 1.0
    assert pointing_hit(peaked(SHAPE, 60, 40), mask, tolerance_px=1) == 1.0


def test_every_maximum_counts_so_a_tie_with_one_maximum_on_the_object_is_a_hit():
    mask = box_mask(SHAPE, BOX)
    saliency = peaked(SHAPE, 190, 90) + peaked(SHAPE, 45, 35)
    assert pointing_hit(saliency, mask) == 1.0
    assert pointing_hit(peaked(SHAPE, 190, 90) + peaked(SHAPE, 5, 95), mask) == 0.0
    assert pointing_hit(np.ones(SHAPE), mask) == 1.0, "a flat map: every pixel is a maximum"


def test_an_empty_mask_is_not_counted_and_a_map_without_a_finite_value_misses():
    assert pointing_hit(peaked(SHAPE, 50, 40), np.zeros(SHAPE, dtype=bool)) is None
    mask = box_mask(SHAPE, BOX)
    assert pointing_hit(np.full(SHAPE, np.nan), mask) == 0.0
    assert pointing_hit(np.full(SHAPE, np.inf), mask) == 0.0
    saliency = np.full(SHAPE, np.nan)
    saliency[40, 50] = 0.5  # the one finite value is the maximum
    assert pointing_hit(saliency, mask) == 1.0
    with pytest.raises(ValueError, match="one"):
        pointing_hit(np.zeros((10, 10)), np.ones((10, 11), dtype=bool))


def test_the_distance_is_exact_euclidean_on_random_masks():
    rng = np.random.default_rng(3)
    for _ in range(20):
        height, width = (int(v) for v in rng.integers(8, 60, 2))
        mask = rng.random((height, width)) < 0.01
        mask[int(rng.integers(height)), int(rng.integers(width))] = True
        x, y = int(rng.integers(width)), int(rng.integers(height))
        ys, xs = np.nonzero(mask)
        nearest = int(((xs - x) ** 2 + (ys - y) ** 2).min())
        for tolerance in (0, 3, 7, 15):
            assert pointing_hit(peaked((height, width), x, y), mask, tolerance) == float(nearest <= tolerance**2)


# ------------------------------------------------------------------ the example scenes, in every format


@pytest.fixture
def scenes(tmp_path: Path) -> list[tuple[Path, int, tuple[int, int, int, int], tuple[int, int]]]:
    shapes = _shapes()
    rng = np.random.default_rng(20261201)
    (tmp_path / "photos").mkdir()
    made = []
    for i, (width, height) in enumerate([(96, 72), (64, 96), (120, 80)]):
        image, label, box = shapes.make_scene(rng, width, height)
        path = tmp_path / "photos" / f"scene_{i}.png"
        image.save(path)
        made.append((path, label, box, (height, width)))
    return made


def _write_formats(folder: Path, scenes) -> list[Path]:
    classes = _shapes().CLASSES
    csv_file = folder / "boxes.csv"
    rows = [f"photos/{p.name},{','.join(map(str, box))},{classes[label]}" for p, label, box, _ in scenes]
    csv_file.write_text("path,x0,y0,x1,y1,class\n" + "\n".join(rows) + "\n")
    (folder / "ann").mkdir()
    by_image = folder / "ann" / "by_image.json"  # paths relative to the file's own folder; class as an index
    by_image.write_text(json.dumps({f"../photos/{p.name}": [{"box": list(box), "class": label}] for p, label, box, _ in scenes}))
    bare = folder / "bare.json"  # bare stems and plain boxes
    bare.write_text(json.dumps({p.stem: [list(box)] for p, _, box, _ in scenes}))
    listed = folder / "listed.json"
    listed.write_text(json.dumps([{"path": f"photos/{p.name}", "box": list(box), "class": classes[label]} for p, label, box, _ in scenes]))
    (folder / "masks").mkdir()
    for path, _, box, shape in scenes:
        Image.fromarray(box_mask(shape, box).astype(np.uint8) * 255).save(folder / "masks" / path.name)
    return [csv_file, by_image, bare, listed, folder / "masks"]


def test_every_format_gives_the_scenes_boxes_and_the_game_scores_them(tmp_path, scenes):
    classes = _shapes().CLASSES
    for spec in _write_formats(tmp_path, scenes):
        table = load_regions(spec)
        assert isinstance(table, RegionTable)
        for path, label, box, (height, width) in scenes:
            regions = table.find(path)
            assert regions is not None and len(regions) == 1, spec
            explained = lambda written, label=label: written in (classes[label], str(label))  # noqa: E731
            mask, notices = object_mask(regions, (height, width), explained)
            assert notices == [] and mask is not None, (spec, notices)
            assert np.array_equal(mask, box_mask((height, width), box)), spec
            x0, y0, x1, y1 = box
            assert pointing_hit(peaked((height, width), (x0 + x1) // 2, (y0 + y1) // 2), mask) == 1.0
            far = max(((0, 0), (width - 1, 0), (0, height - 1), (width - 1, height - 1)), key=lambda c: _distance_to_box(*c, box))
            assert pointing_hit(peaked((height, width), *far), mask) == 0.0
        assert table.unmatched(p for p, *_ in scenes) == []


def test_a_class_makes_a_box_count_only_when_that_class_is_explained(tmp_path, scenes):
    path, label, box, shape = scenes[0]
    table = load_regions(_write_formats(tmp_path, scenes)[0])
    regions = table.find(path)
    assert regions is not None and regions[0].class_name == _shapes().CLASSES[label]
    assert object_mask(regions, shape, lambda written: False) == (None, [])


def test_the_box_convention_agrees_with_the_pointing_game_test(scenes):
    """x1/y1 exclusive (the last pixel is x1-1, y1-1), as test_pointing_game's `_distance_to_box` reads make_scene's box."""
    path, _, box, shape = scenes[0]
    mask, _ = object_mask([Region(box, None, None, "here")], shape, ANY_CLASS)
    assert mask is not None and mask.sum() == (box[2] - box[0]) * (box[3] - box[1])
    for y in range(0, shape[0], 2):
        for x in range(0, shape[1], 3):
            expected = _distance_to_box(x, y, box) <= POINTING_TOLERANCE_PX
            assert pointing_hit(peaked(shape, x, y), mask) == float(expected), (x, y)


# ------------------------------------------------------------------ matching, notices


def test_paths_match_as_truth_files_do_and_unmatched_rows_are_listed(tmp_path):
    (tmp_path / "labels").mkdir()
    spec = tmp_path / "labels" / "boxes.csv"
    spec.write_text(
        "../imgs/a.jpg,0,0,4,4\n../imgs/a.jpg,6,6,8,8\nb.jpg,1,1,2,2\ndup/d.jpg,0,0,1,1\nother/d.jpg,0,0,1,1\nnowhere.jpg,0,0,1,1\n"
    )
    table = load_regions(spec)
    regions = table.find(tmp_path / "imgs" / "a.jpg")
    assert regions is not None and [r.where for r in regions] == ["boxes.csv row 1", "boxes.csv row 2"], "several rows, several objects"
    assert table.find(Path("somewhere/b.jpg")) is not None and table.find(Path("b.png")) is not None, "a bare name, a bare stem"
    assert table.find(Path("elsewhere/d.jpg")) is None, "a bare name two rows share says nothing"
    assert table.find(tmp_path / "labels" / "dup" / "d.jpg") is not None
    inputs = [tmp_path / "imgs" / "a.jpg", Path("b.jpg"), tmp_path / "labels" / "dup" / "d.jpg"]
    assert table.unmatched(inputs) == ["other/d.jpg", "nowhere.jpg"]


def test_a_bare_box_and_fractional_coordinates(tmp_path):
    """One box may stand alone; fractions (continuous coordinates) cover every pixel they touch."""
    (tmp_path / "boxes.json").write_text('{"a.jpg": [1.5, 2, 3.2, 4]}')
    regions = load_regions(tmp_path / "boxes.json").find(Path("a.jpg"))
    assert regions == [Region((1, 2, 4, 4), None, None, 'boxes.json "a.jpg" box 1')]


def test_a_mask_is_found_by_the_longest_tail_of_the_image_path(tmp_path):
    for name in ("a/cat.png", "b/cat.png", "dog.png", "cow.jpg.png"):
        (tmp_path / "masks" / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("L", (8, 8), 255).save(tmp_path / "masks" / name)
    table = load_regions(tmp_path / "masks")
    found = table.find(Path("photos/a/cat.jpg"))
    assert found is not None and found[0].mask == tmp_path / "masks" / "a" / "cat.png" and found[0].where == "masks/a/cat.png"
    assert table.find(Path("photos/cat.jpg")) is None, "two masks share the stem: neither is guessed"
    assert table.find(Path("photos/dog.jpg")) is not None and table.find(Path("cow.jpg")) is not None
    assert table.unmatched([Path("photos/a/cat.jpg"), Path("x/dog.jpeg")]) == ["b/cat.png", "cow.jpg.png"]


def test_boxes_outside_the_image_give_a_notice_and_the_rest_still_count(tmp_path):
    spec = tmp_path / "boxes.csv"
    spec.write_text("a.jpg,-5,-5,10,10\na.jpg,500,500,600,600\na.jpg,20,20,30,30\na.jpg,50,50,60,60,dog\n")
    regions = load_regions(spec).find(Path("a.jpg"))
    assert regions is not None
    mask, notices = object_mask(regions, (40, 64), lambda written: written == "cat")
    assert mask is not None and np.array_equal(mask, box_mask((40, 64), (0, 0, 10, 10)) | box_mask((40, 64), (20, 20, 30, 30)))
    assert notices == [
        "boxes.csv row 1: box -5,-5,10,10 reaches outside the 64x40 image, clipped to 0,0,10,10",
        "boxes.csv row 2: box 500,500,600,600 lies wholly outside the 64x40 image, left out (coordinates of a resized copy?)",
    ]
    assert object_mask(regions[1:2], (40, 64), ANY_CLASS)[0] is None, "no region counts: no mask"


def test_a_mask_of_another_size_is_an_error_notice_and_left_out(tmp_path):
    (tmp_path / "masks").mkdir()
    Image.new("L", (10, 8), 0).save(tmp_path / "masks" / "a.png")
    spot = np.zeros((40, 64), dtype=np.uint8)
    spot[5:7, 3:9] = 1
    Image.fromarray(spot).save(tmp_path / "masks" / "b.png")
    (tmp_path / "masks" / "c.png").write_text("not a png")
    table = load_regions(tmp_path / "masks")
    regions = [region for name in ("a.jpg", "b.jpg", "c.jpg") for region in table.find(Path(name)) or []]
    mask, notices = object_mask(regions, (40, 64), ANY_CLASS)
    assert mask is not None and np.array_equal(mask, spot > 0)
    assert len(notices) == 2 and all("\n" not in n for n in notices)
    assert notices[0] == "masks/a.png: the mask is 10x8 but the photo 64x40, left out; save it at the photo's size"
    assert notices[1].startswith("masks/c.png: cannot read the mask (") and notices[1].endswith("left out")


# ------------------------------------------------------------------ a bad file is one clear line

BAD_FILES = [
    ("nope.csv", None, "no such file or folder"),
    ("boxes.xml", "<annotation/>", "not a .csv or .json file"),
    ("boxes.csv", "", "names no image"),
    ("boxes.csv", "path,x0,y0,x1,y1\n", "names no image"),
    ("boxes.csv", "a.jpg,1,2,3\n", "row 1: 4 column(s) (`a.jpg,1,2,3`), a box needs 5"),
    ("boxes.csv", "a.jpg,1,2,3,4,cat,extra\n", "row 1: 7 columns"),
    ("boxes.csv", "path,x0,y0,x1,y1\n\na.jpg,1,2,3,4\nb.jpg,1,two,3,4\n", "row 4: y0 is `two`, not a number"),
    ("boxes.csv", "a.jpg,10,2,5,4\n", "row 1: x1 (5) is not past x0 (10)"),
    ("boxes.csv", "a.jpg,1,20,5,20\n", "row 1: y1 (20) is not past y0 (20)"),
    ("boxes.csv", ",1,2,3,4\n", "row 1: no path"),
    ("boxes.csv", b"\xff\xfe\x00a", "not UTF-8 text"),
    ("boxes.json", "{'a.jpg': []}", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ("boxes.json", "42", "the JSON is a number, not boxes by image"),
    ("boxes.json", "{}", "names no image"),
    ("boxes.json", '{"a.jpg": "1,2,3,4"}', '"a.jpg": a string, not a list of boxes'),
    ("boxes.json", '{"a.jpg": [[1, 2, 3]]}', '"a.jpg" box 1: box `[1, 2, 3]`, not [x0, y0, x1, y1]'),
    ("boxes.json", '{"a.jpg": [[1, 2, "x", 4]]}', '"a.jpg" box 1: x1 is `x`, not a number'),
    ("boxes.json", '{"a.jpg": [7]}', '"a.jpg" box 1: a number (`7`), not [x0, y0, x1, y1]'),
    ("boxes.json", '[{"box": [1, 2, 3, 4]}]', 'item 1: `{"box": [1, 2, 3, 4]}` has no "path" string'),
    ("boxes.json", '[{"path": "a.jpg", "bbox": [1, 2, 3, 4]}]', 'item 1: no "box" (keys: `path, bbox`)'),
    ("boxes.json", '[{"path": "a.jpg", "box": [1, 2, 3, 4], "class": true}]', "item 1: class `true` is neither"),
    ("boxes.json", '[{"path": "a.jpg", "box": [5, 2, 3, 4]}]', "item 1: x1 (3) is not past x0 (5)"),
    ("masks", "folder", "a folder with no .png mask in it"),
]


@pytest.mark.parametrize("name,content,expected", BAD_FILES)
def test_a_bad_boxes_file_is_one_clear_line_with_a_fix(tmp_path, name, content, expected):
    spec = tmp_path / name
    if content == "folder":
        spec.mkdir()
        (spec / "readme.txt").write_text("masks go here")
    elif isinstance(content, bytes):
        spec.write_bytes(content)
    elif content is not None:
        spec.write_text(content)
    with pytest.raises(UsageError) as raised:
        load_regions(spec)
    error = raised.value
    assert error.message.startswith(f"⟨boxes={spec}⟩"), "the option is marked, never spelled as a flag"
    assert expected in error.message
    assert error.hint and "\n" not in str(error) and "--" not in str(error).replace(str(spec), "")
