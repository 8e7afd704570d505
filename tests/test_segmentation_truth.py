"""Segmentation models' ground truth (folders of mask PNGs) and the overlap of a predicted label map with it.

Every mask is written here into tmp_path with Pillow; no model runs. The
overlap figures are checked on small arrays whose counts are worked by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gradcam_cli.errors import InputError, UsageError
from gradcam_cli.evaluate import overlap
from gradcam_cli.evaluate.overlap import Overlap, class_overlap, missed_region
from gradcam_cli.inputs import segmentation_truth
from gradcam_cli.inputs.segmentation_truth import IGNORED, holds_masks, read_segmentation_truth

NAMES = ["background", "cat", "dog", "tabby, tabby cat", "car"]
HW = (2, 3)  # height, width of every mask here
VOC_COLOURS = [(0, 0, 0), (128, 0, 0), (0, 128, 0), (128, 128, 0), (0, 0, 128)]


def _png(path: Path, values: list[list[int]] | np.ndarray, mode: str = "L") -> Path:
    """A mask PNG of these values: mode L (8-bit), P (palette: the values are indices) or I;16 (16-bit)."""
    array = np.asarray(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "P":
        image = Image.fromarray(array.astype(np.uint8), "L").convert("P")  # the indices kept as they are
        image.putpalette([channel for colour in VOC_COLOURS for channel in colour] + [224, 224, 192] * 251)
    elif mode == "I;16":
        image = Image.fromarray(array.astype(np.uint16))
    else:
        image = Image.fromarray(array.astype(np.uint8), mode)
    image.save(path)
    return path


def _read(folder: Path, num_classes: int = 5, names: list[str] | None = NAMES) -> segmentation_truth.SegmentationTruth:
    return read_segmentation_truth(folder, names, num_classes)


def _input_error(truth: segmentation_truth.SegmentationTruth, path: Path, mask: Path, hw: tuple[int, int] = HW) -> str:
    """The one line reading an image's mask raises; it must name the mask."""
    with pytest.raises(InputError) as caught:
        truth.of(path, hw)
    message = str(caught.value)
    assert "\n" not in message, message
    assert str(mask) in message, message
    return message


def _usage_error(folder: Path, num_classes: int = 5) -> str:
    """The one line reading the folder raises; it must name the folder."""
    with pytest.raises(UsageError) as caught:
        _read(folder, num_classes)
    message = str(caught.value)
    assert "\n" not in message, message
    assert f"truth={folder}" in message, message
    return message


# ------------------------------------------------------------------ index masks


def test_an_index_mask_is_class_indices_and_8_bit_255_is_void(tmp_path: Path) -> None:
    _png(tmp_path / "masks" / "a.png", [[0, 1, 2], [4, 255, 3]])
    truth = _read(tmp_path / "masks")
    assert truth.layout == "index masks" and len(truth) == 1
    labels = truth.of(tmp_path / "imgs" / "a.jpg", HW)
    assert labels is not None and labels.dtype == np.int32
    assert labels.tolist() == [[0, 1, 2], [4, IGNORED, 3]]
    assert truth.of(tmp_path / "imgs" / "b.jpg", HW) is None  # no mask names it


def test_a_voc_palette_mask_is_read_as_its_indices_never_its_colours(tmp_path: Path) -> None:
    path = _png(tmp_path / "SegmentationClass" / "2007_000032.png", [[0, 1, 1], [255, 4, 0]], mode="P")
    with Image.open(path) as image:
        assert image.mode == "P" and image.convert("RGB").getpixel((1, 0)) == (128, 0, 0)  # it is VOC's red
    labels = _read(tmp_path / "SegmentationClass").of(Path("JPEGImages/2007_000032.jpg"), HW)
    assert labels is not None and labels.tolist() == [[0, 1, 1], [IGNORED, 4, 0]]


def test_a_16_bit_mask_holds_many_classes_and_255_is_a_class_where_the_model_has_it(tmp_path: Path) -> None:
    _png(tmp_path / "masks16" / "a.png", [[0, 255, 300], [399, 1, 2]], mode="I;16")
    with Image.open(tmp_path / "masks16" / "a.png") as image:
        assert image.mode.startswith("I")
    labels = _read(tmp_path / "masks16", num_classes=400, names=None).of(Path("a.jpg"), HW)
    assert labels is not None and labels.tolist() == [[0, 255, 300], [399, 1, 2]]
    _png(tmp_path / "masks8" / "a.png", [[0, 255, 3], [0, 0, 0]])
    labels = _read(tmp_path / "masks8", num_classes=256, names=None).of(Path("a.jpg"), HW)
    assert labels is not None and labels[0, 1] == 255  # 256 classes: 255 is the last one, not void


def test_a_class_the_model_lacks_and_a_mask_of_another_size_are_one_line_naming_the_mask(tmp_path: Path) -> None:
    seven = _png(tmp_path / "masks" / "a.png", [[0, 7, 1], [0, 0, 0]])
    small = _png(tmp_path / "masks" / "b.png", np.zeros((80, 100)))
    truth = _read(tmp_path / "masks")
    message = _input_error(truth, Path("a.jpg"), seven)
    assert message == f"mask {seven} holds class 7; the model has 5 classes (0..4); " + (
        "a pixel of an index mask is a class index of the model (255 in an 8-bit mask: void)"
    )
    message = _input_error(truth, Path("b.jpg"), small, hw=(160, 200))
    assert message == f"mask {small} is 100x80 but the image is 200x160; a truth mask must have its image's size"


def test_a_broken_mask_costs_its_image_alone_when_it_is_asked_for(tmp_path: Path) -> None:
    folder = tmp_path / "masks"
    _png(folder / "good.png", [[1, 1, 1], [0, 0, 0]])
    (folder / "text.png").write_text("not a picture", encoding="utf-8")
    _png(folder / "colour.png", np.zeros((2, 3, 3)), mode="RGB")
    truth = _read(folder)  # listing reads no mask
    assert "not a PNG image" in _input_error(truth, Path("text.jpg"), folder / "text.png")
    assert "is a RGB image" in _input_error(truth, Path("colour.jpg"), folder / "colour.png")
    labels = truth.of(Path("good.jpg"), HW)
    assert labels is not None and labels.sum() == 3


# ------------------------------------------------------------------ class folders


def test_class_folders_named_by_any_synonym_or_index_and_unmarked_pixels_are_class_0(tmp_path: Path) -> None:
    folder = tmp_path / "masks"
    _png(folder / "cat" / "a.png", [[255, 0, 0], [0, 0, 0]])
    _png(folder / "Tabby_Cat" / "a.png", [[0, 1, 0], [0, 0, 0]])  # 'tabby cat', a synonym of class 3, any case
    _png(folder / "4" / "a.png", [[0, 0, 9], [0, 0, 9]], mode="P")  # by its index; a palette's raw index 9 is nonzero
    _png(folder / "cat" / "b.png", [[1, 1, 1], [1, 1, 1]])
    truth = _read(folder)
    assert truth.layout == "class folders" and not truth.zero_drawn
    labels = truth.of(Path("photos/a.jpg"), HW)
    assert labels is not None and labels.tolist() == [[1, 3, 4], [0, 0, 4]]
    labels = truth.of(Path("b.jpg"), HW)
    assert labels is not None and labels.tolist() == [[1, 1, 1], [1, 1, 1]]


def test_where_class_0_has_a_folder_unmarked_pixels_are_ignored_and_doubly_marked_ones_too(tmp_path: Path) -> None:
    folder = tmp_path / "masks"
    _png(folder / "background" / "a.png", [[1, 0, 0], [0, 0, 0]])
    _png(folder / "dog" / "a.png", [[0, 1, 1], [0, 0, 0]])
    _png(folder / "car" / "a.png", [[0, 0, 1], [1, 0, 0]])  # (0, 2) is a dog and a car: the truth contradicts itself
    truth = _read(folder)
    assert truth.zero_drawn
    labels = truth.of(Path("a.jpg"), HW)
    assert labels is not None and labels.tolist() == [[0, 2, IGNORED], [4, IGNORED, IGNORED]]
    assert "is 3x2 but the image is 4x2" in _input_error(truth, Path("a.jpg"), folder / "background" / "a.png", hw=(2, 4))


def test_a_folder_of_both_layouts_or_of_no_png_is_one_line(tmp_path: Path) -> None:
    _png(tmp_path / "mixed" / "cat" / "a.png", [[0, 0, 0], [0, 0, 0]])
    _png(tmp_path / "mixed" / "zebra" / "a.png", [[0, 0, 0], [0, 0, 0]])
    _png(tmp_path / "mixed" / "b.png", [[0, 0, 0], [0, 0, 0]])
    message = _usage_error(tmp_path / "mixed")
    assert "mixes class folders (cat/) with masks that are no class's (zebra/, b.png)" in message
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    _png(tmp_path / "empty" / ".hidden" / "a.png", [[0, 0, 0], [0, 0, 0]])  # hidden folders hold no masks
    assert "an empty folder, no PNG mask in it" in _usage_error(tmp_path / "empty")
    (tmp_path / "jpegs").mkdir()
    (tmp_path / "jpegs" / "a.jpg").write_bytes(b"\xff\xd8")
    assert "no PNG mask, only 1 other file(s), such as a.jpg" in _usage_error(tmp_path / "jpegs")
    assert "a file, not a folder of mask PNGs" in _usage_error(tmp_path / "jpegs" / "a.jpg")
    assert "no such folder" in _usage_error(tmp_path / "nowhere")


def test_folders_naming_no_class_are_index_masks_below_them(tmp_path: Path) -> None:
    _png(tmp_path / "masks" / "val" / "a.png", [[1, 2, 3], [0, 0, 0]])
    _png(tmp_path / "masks" / "7" / "b.png", [[0, 0, 0], [0, 0, 0]])  # 7 is past the model's 5 classes: no class folder
    _png(tmp_path / "masks" / ("1" * 30) / "c.png", [[0, 0, 0], [0, 0, 0]])  # a scene's id, not a class index
    _png(tmp_path / "masks" / "²" / "d.png", [[0, 0, 0], [0, 0, 0]])  # digits of another script: no class either
    truth = _read(tmp_path / "masks")
    assert truth.layout == "index masks"
    labels = truth.of(Path("a.jpg"), HW)
    assert labels is not None and labels.tolist() == [[1, 2, 3], [0, 0, 0]]


# ------------------------------------------------------------------ binary models


def test_a_binary_models_masks_mark_its_foreground_class_0_and_its_background_1(tmp_path: Path) -> None:
    _png(tmp_path / "flat" / "a.png", [[0, 255, 1], [0, 0, 0]])  # 0/255 and 0/1 masks alike
    labels = _read(tmp_path / "flat", num_classes=1, names=None).of(Path("a.jpg"), HW)
    assert labels is not None and labels.tolist() == [[1, 0, 0], [1, 1, 1]]
    _png(tmp_path / "folders" / "Foreground" / "a.png", [[0, 0, 0], [9, 0, 0]])
    truth = _read(tmp_path / "folders", num_classes=1, names=["lesion"])
    assert truth.layout == "class folders"
    labels = truth.of(Path("a.jpg"), HW)
    assert labels is not None and labels.tolist() == [[1, 1, 1], [0, 1, 1]]


# ------------------------------------------------------------------ which mask is an image's


def test_masks_find_their_images_by_stem_relative_path_or_tail_and_a_shared_stem_finds_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "masks"
    _png(folder / "train" / "a.png", [[1, 1, 1], [1, 1, 1]])
    _png(folder / "val" / "a.png", [[2, 2, 2], [2, 2, 2]])
    _png(folder / "sub" / "c.PNG", [[3, 3, 3], [3, 3, 3]])
    _png(folder / "unused.png", [[0, 0, 0], [0, 0, 0]])
    truth = _read(folder)
    monkeypatch.chdir(tmp_path)

    def first(path: Path) -> int | None:
        labels = truth.of(path, HW)
        return None if labels is None else int(labels[0, 0])

    assert first(Path("val/a.jpg")) == 2  # its path below the folder, from the working folder
    assert first(Path("train/a.png")) == 1
    assert first(tmp_path / "data" / "images" / "val" / "a.jpg") == 2  # the longest tail of its path
    assert first(Path("other/a.jpg")) is None  # two masks share the stem: none is guessed
    assert first(Path("photos/c.jpeg")) == 3  # a unique stem, whatever the folders and the extension's case
    inputs = [Path("val/a.jpg"), Path("photos/c.jpeg"), Path("other/a.jpg")]
    assert truth.unmatched(inputs) == ["train/a.png", "unused.png"]


def test_unmatched_names_every_class_folders_mask_of_an_image_no_input_names(tmp_path: Path) -> None:
    folder = tmp_path / "masks"
    for name in ("cat/a.png", "dog/a.png", "dog/b.png"):
        _png(folder / name, [[0, 0, 0], [0, 0, 0]])
    assert _read(folder).unmatched([Path("b.jpg")]) == ["cat/a.png", "dog/a.png"]


def test_a_masks_folder_is_told_from_a_truth_file(tmp_path: Path) -> None:
    (tmp_path / "truth.csv").write_text("a.jpg,cat\n", encoding="utf-8")
    assert holds_masks(tmp_path) and not holds_masks(tmp_path / "truth.csv") and not holds_masks(tmp_path / "nowhere")


# ------------------------------------------------------------------ overlap


def test_overlap_figures_worked_by_hand() -> None:
    truth = np.array([[0, 0, 1, 1], [0, 2, 1, 1], [IGNORED, IGNORED, 2, 2]])
    predicted = np.array([[0, 1, 1, 1], [0, 2, 2, 0], [1, 2, 2, 2]])
    found = class_overlap(predicted, truth, [0, 1, 2, 3])
    # class 0: T = 3 pixels, P = 3 (its 4th, at (1,3), where the truth says 1), T ∩ P = 2, T ∪ P = 4
    assert found[0] == Overlap(iou=2 / 4, dice=4 / 6, true_area=3, predicted_area=3, missed_area=1)
    # class 1: T = 4, P = 3 (the ignored (2,0) left out), T ∩ P = 2, T ∪ P = 5
    assert found[1] == Overlap(iou=2 / 5, dice=4 / 7, true_area=4, predicted_area=3, missed_area=2)
    # class 2: T = 3, P = 4 (the ignored (2,1) left out), T ∩ P = 3, T ∪ P = 4
    assert found[2] == Overlap(iou=3 / 4, dice=6 / 7, true_area=3, predicted_area=4, missed_area=0)
    assert found[3] == Overlap(iou=None, dice=None, true_area=0, predicted_area=0, missed_area=0)  # in neither: no figure
    assert missed_region(predicted, truth, 1).tolist() == [[False] * 4, [False, False, True, True], [False] * 4]
    assert not missed_region(predicted, truth, 2).any()


def test_overlap_of_a_class_only_one_side_has_is_0_and_other_labels_count_for_none() -> None:
    truth = np.array([[1, 1], [9, IGNORED]])  # 9: a class not asked about
    predicted = np.array([[-2, 3], [3, 3]])  # -2: a "none" the caller may use
    found = class_overlap(predicted, truth, (1, 3, 3))
    assert list(found) == [1, 3]
    assert found[1] == Overlap(iou=0.0, dice=0.0, true_area=2, predicted_area=0, missed_area=2)
    assert found[3] == Overlap(iou=0.0, dice=0.0, true_area=0, predicted_area=2, missed_area=0)
    assert class_overlap(predicted, truth, []) == {}
    with pytest.raises(ValueError, match="one size"):
        class_overlap(predicted, truth[:1], [1])
    assert overlap.IGNORED == segmentation_truth.IGNORED
