"""Detectors' ground truth (COCO JSON, YOLO label folders, box CSVs) and the matching of detections to it.

Every file is written here into tmp_path; no model, no image is decoded. The
matching is checked on a case worked by hand and against pycocotools' greedy
loop: pycocotools itself when it is installed (it is no dependency), and a
plain transcription of its `evaluateImg` loop here either way.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from gradcam_cli.errors import UsageError
from gradcam_cli.evaluate.matching import Matching, match_detections
from gradcam_cli.inputs.detection_truth import TrueBox, read_detection_truth
from gradcam_cli.values import ClassIndex

CLASSES = ClassIndex(["background", "cat", "dog", "tabby, tabby cat"])
HW = (100, 200)  # height, width of every image here


def _error(path: Path, *words: str) -> str:
    """The one-line message reading `path` raises; it must name the file and each of `words`."""
    with pytest.raises(UsageError) as caught:
        read_detection_truth(path, CLASSES)
    return _one_line(caught.value, path, *words)


def _one_line(error: BaseException, path: Path, *words: str) -> str:
    message = str(error)
    assert "\n" not in message, message
    assert f"truth={path}" in message, message
    for word in words:
        assert word in message, (word, message)
    return message


# ------------------------------------------------------------------ COCO


def _coco(tmp_path: Path, **changes: object) -> Path:
    data: dict[str, object] = {
        "images": [
            {"id": 1, "file_name": "a.jpg", "width": 200, "height": 100},
            {"id": 2, "file_name": "sub/b.jpg", "width": 200, "height": 100},
            {"id": 3, "file_name": "empty.jpg", "width": 200, "height": 100},
        ],
        "annotations": [
            {"id": 10, "image_id": 1, "category_id": 17, "bbox": [10, 20, 30, 40], "iscrowd": 0},
            {"id": 11, "image_id": 1, "category_id": 18, "bbox": [0, 0, 200, 100]},
            {"id": 12, "image_id": 1, "category_id": 17, "bbox": [50, 50, 10, 10], "iscrowd": 1},
            {"id": 13, "image_id": 2, "category_id": 99, "bbox": [1.5, 2.5, 3, 4]},
        ],
        "categories": [{"id": 17, "name": "cat"}, {"id": 18, "name": "dog"}, {"id": 99, "name": "zebra"}],
    }
    data.update(changes)
    (tmp_path / "annotations").mkdir(exist_ok=True)
    path = tmp_path / "annotations" / "instances_val.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_coco_boxes_in_pixels_crowds_left_out_and_images_without_objects(tmp_path: Path) -> None:
    truth = read_detection_truth(_coco(tmp_path), CLASSES)
    assert truth.of(tmp_path / "val" / "a.jpg", HW) == [TrueBox((10, 20, 40, 60), "cat", 1), TrueBox((0, 0, 200, 100), "dog", 2)]
    assert truth.of(Path("elsewhere/sub/b.jpg"), HW) == [TrueBox((1.5, 2.5, 4.5, 6.5), "zebra", None)]
    assert truth.of(tmp_path / "empty.jpg", HW) == []  # in `images`, no annotation: no objects
    assert truth.of(tmp_path / "other.jpg", HW) is None  # the file says nothing of it
    assert truth.unknown == ["zebra"]
    assert truth.unmatched([tmp_path / "a.jpg", tmp_path / "empty.jpg"]) == ["sub/b.jpg"]


def test_coco_paths_from_the_files_folder_or_the_current_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = [{"id": 1, "file_name": "x/one.jpg"}, {"id": 2, "file_name": "y/one.jpg"}]
    annotations = [{"image_id": 1, "category_id": 17, "bbox": [0, 0, 1, 1]}, {"image_id": 2, "category_id": 18, "bbox": [0, 0, 2, 2]}]
    truth = read_detection_truth(_coco(tmp_path, images=images, annotations=annotations), CLASSES)
    assert [box.name for box in truth.of(tmp_path / "annotations" / "x" / "one.jpg", HW) or []] == ["cat"]  # the file's folder
    monkeypatch.chdir(tmp_path)
    assert [box.name for box in truth.of(Path("y/one.jpg").resolve(), HW) or []] == ["dog"]  # the current folder
    assert truth.of(tmp_path / "z" / "one.jpg", HW) is None  # two rows share the bare name: no guess


def test_coco_bad_files_are_one_line_each(tmp_path: Path) -> None:
    _error(tmp_path / "missing.json", "no such file")
    (tmp_path / "bad.json").write_text('{"images": [', encoding="utf-8")
    _error(tmp_path / "bad.json", "not valid JSON", "line 1")
    (tmp_path / "list.json").write_text("[]", encoding="utf-8")
    _error(tmp_path / "list.json", "not a COCO file", "annotations")
    _error(_coco(tmp_path, images=None), "no `images` list")
    _error(_coco(tmp_path, categories=[{"id": 1}]), "categories[0]", "no name")
    _error(_coco(tmp_path, annotations=[{"image_id": 1, "bbox": [0, 0, 1, 1]}]), "annotations[0]", "no category_id")
    _error(
        _coco(tmp_path, annotations=[{"image_id": 1, "category_id": 17, "bbox": [0, 0, 1]}]), "bbox `[0, 0, 1]`", "[x, y, width, height]"
    )
    _error(_coco(tmp_path, annotations=[{"image_id": 7, "category_id": 17, "bbox": [0, 0, 1, 1]}]), "image_id `7`", "`images`")
    _error(_coco(tmp_path, annotations=[{"image_id": 1, "category_id": 5, "bbox": [0, 0, 1, 1]}]), "category_id `5`", "`categories`")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    _error(tmp_path / "binary.json", "not UTF-8")


def test_a_box_outside_its_image_or_empty_is_one_line_when_its_image_is_asked_for(tmp_path: Path) -> None:
    annotations = [
        {"id": 5, "image_id": 1, "category_id": 17, "bbox": [190, 10, 11, 10]},  # 1 px over the right edge: clipped
        {"id": 6, "image_id": 2, "category_id": 17, "bbox": [190, 10, 20, 10]},  # 10 px over
        {"id": 7, "image_id": 3, "category_id": 17, "bbox": [10, 10, 0, 5]},  # no width
    ]
    path = _coco(tmp_path, annotations=annotations)
    truth = read_detection_truth(path, CLASSES)
    assert truth.of(tmp_path / "a.jpg", HW) == [TrueBox((190, 10, 200, 20), "cat", 1)]
    with pytest.raises(UsageError) as outside:
        truth.of(tmp_path / "b.jpg", HW)
    _one_line(outside.value, path, "annotations[1] (id 6)", "(190, 10, 210, 20)", "outside the 200x100 image", "pixels")
    with pytest.raises(UsageError) as empty:
        truth.of(tmp_path / "empty.jpg", HW)
    _one_line(empty.value, path, "annotations[2] (id 7)", "(10, 10, 10, 15)", "is empty")


# ------------------------------------------------------------------ YOLO


def _yolo(tmp_path: Path, labels: dict[str, str], names: str | None = None, names_file: str = "data.yaml") -> Path:
    root = tmp_path / "dataset"
    for written, text in labels.items():
        (root / written).parent.mkdir(parents=True, exist_ok=True)
        (root / written).write_text(text, encoding="utf-8")
    root.mkdir(parents=True, exist_ok=True)
    if names is not None:
        (root / names_file).write_text(names, encoding="utf-8")
    return root


def test_yolo_fractions_become_exact_pixels_and_an_empty_file_no_objects(tmp_path: Path) -> None:
    root = _yolo(tmp_path, {"labels/val/a.txt": "1 0.5 0.25 0.5 0.5\n\n2 0.125 0.5 0.25 1 0.9\n", "labels/val/none.txt": ""})
    truth = read_detection_truth(root, CLASSES)
    image = tmp_path / "dataset" / "images" / "val" / "a.jpg"
    assert truth.of(image, HW) == [TrueBox((50.0, 0.0, 150.0, 50.0), "cat", 1), TrueBox((0.0, 0.0, 50.0, 100.0), "dog", 2)]
    assert truth.of(Path("photos/none.png"), HW) == []
    assert truth.of(Path("photos/other.png"), HW) is None
    assert truth.unmatched([image]) == ["labels/val/none.txt"]


def test_yolo_names_file_turns_indices_into_names(tmp_path: Path) -> None:
    labels = {"labels/a.txt": "0 0.5 0.5 0.5 0.5\n1 0.5 0.5 0.5 0.5\ndog 0.5 0.5 0.5 0.5\n", "README.roboflow.txt": "not labels"}
    for names, names_file in (
        ("names: [tabby cat, zebra]\n", "data.yaml"),
        ("names:\n  0: tabby cat\n  1: zebra\n", "data.yaml"),
        ("tabby cat\nzebra\n\n", "classes.txt"),
    ):
        truth = read_detection_truth(_yolo(tmp_path / names_file / str(len(names)), labels, names, names_file), CLASSES)
        found = truth.of(Path("a.jpg"), HW) or []
        assert [(box.name, box.index) for box in found] == [("tabby, tabby cat", 3), ("zebra", None), ("dog", 2)]
        assert truth.unknown == ["zebra"]


def test_yolo_label_found_by_the_images_folders_when_stems_repeat(tmp_path: Path) -> None:
    root = _yolo(tmp_path, {"labels/train/a.txt": "1 0.5 0.5 0.5 0.5\n", "labels/val/a.txt": "2 0.5 0.5 0.5 0.5\n"})
    truth = read_detection_truth(root, CLASSES)
    assert [box.name for box in truth.of(root / "images" / "val" / "a.jpg", HW) or []] == ["dog"]
    assert [box.name for box in truth.of(root / "images" / "train" / "a.jpg", HW) or []] == ["cat"]
    assert truth.of(tmp_path / "a.jpg", HW) is None  # both fit as well: no guess
    assert truth.unmatched([root / "images" / "val" / "a.jpg"]) == ["labels/train/a.txt"]


def test_yolo_bad_folders_and_lines_are_one_line_each(tmp_path: Path) -> None:
    message = _error(_yolo(tmp_path / "1", {"labels/a.txt": "1 0.5 0.5 0.5\n"}), "labels/a.txt line 1", "4 fields", "class cx cy w h")
    assert "0.5 0.5 0.5" in message
    _error(_yolo(tmp_path / "2", {"a.txt": "1 0.5 0.5 0.5 0.5\n\n1 0.5 x 0.5 0.5\n"}), "a.txt line 3", "cy is `x`")
    _error(_yolo(tmp_path / "3", {"a.txt": "5 0.5 0.5 0.5 0.5\n"}, "names: [cat, dog]\n"), "a.txt line 1", "class 5", "2 names")
    _error(_yolo(tmp_path / "4", {"a.txt": "0 0.5 0.5 0.5 0.5\n"}, "names: [[1]\n"), "data.yaml", "not valid YAML")
    _error(_yolo(tmp_path / "5", {"a.txt": "0 0.5 0.5 0.5 0.5\n"}, "names: {a: b}\n"), "data.yaml", "names")
    _error(_yolo(tmp_path / "6", {}), "no YOLO label")
    _error(_yolo(tmp_path / "7", {"a.txt": "0 0.5 0.5 0.5 0.5\n"}) / "a.txt", "one YOLO label file", "folder")
    truth = read_detection_truth(_yolo(tmp_path / "8", {"a.txt": "1 0.9 0.5 0.5 0.5\n"}), CLASSES)
    with pytest.raises(UsageError) as outside:
        truth.of(Path("a.jpg"), HW)
    _one_line(outside.value, tmp_path / "8" / "dataset", "a.txt line 1", "(130, 25, 230, 75) px", "outside the 200x100 image")


# ------------------------------------------------------------------ CSV


def test_csv_rows_several_per_image_with_or_without_a_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for header in ("path,class,x1,y1,x2,y2\n", ""):
        path = tmp_path / "truth" / "boxes.csv"
        path.parent.mkdir(exist_ok=True)
        rows = "imgs/a.jpg,cat,1,2,3,4\nimgs/a.jpg,Tabby Cat,0,0,200,100\nb.jpg,zebra,5,5,6,6\nnone.jpg,,,,,\n"
        path.write_text(header + rows, encoding="utf-8")
        truth = read_detection_truth(path, CLASSES)
        assert truth.of(tmp_path / "truth" / "imgs" / "a.jpg", HW) == [
            TrueBox((1, 2, 3, 4), "cat", 1),
            TrueBox((0, 0, 200, 100), "tabby, tabby cat", 3),
        ]
        assert truth.of(Path("anywhere/b.jpg"), HW) == [TrueBox((5, 5, 6, 6), "zebra", None)]
        assert truth.of(Path("none.jpg"), HW) == []
        assert truth.unknown == ["zebra"]
        monkeypatch.chdir(tmp_path / "truth")
        assert truth.unmatched([Path("imgs/a.jpg"), Path("b.jpg")]) == ["none.jpg"]


def test_csv_bad_rows_are_one_line_each(tmp_path: Path) -> None:
    cases = {
        "path,class\na.jpg,cat\n": ("row 1", "classifier", "path,class,x1,y1,x2,y2"),
        "a.jpg,cat\n": ("row 1", "classifier", "path,class,x1,y1,x2,y2"),
        "a.jpg,cat,1,2,3\n": ("row 1", "5 columns", "path,class,x1,y1,x2,y2"),
        "a.jpg,cat,1,2,three,4\n": ("row 1", "x2 is `three`", "path,class,x1,y1,x2,y2"),
        ",cat,1,2,3,4\n": ("row 1", "no path"),
        "a.jpg,,1,2,3,4\n": ("row 1", "no class"),
        "a.jpg,²,1,2,3,4\n": ("row 1", "digits 0-9"),
        "\n\n": ("no rows", "path,class,x1,y1,x2,y2"),
    }
    for number, (text, words) in enumerate(cases.items()):
        path = tmp_path / f"t{number}.csv"
        path.write_text(text, encoding="utf-8")
        _error(path, *words)
    path = tmp_path / "upside.csv"
    path.write_text("a.jpg,cat,10,10,5,20\n", encoding="utf-8")
    with pytest.raises(UsageError) as empty:
        read_detection_truth(path, CLASSES).of(Path("a.jpg"), HW)
    _one_line(empty.value, path, "row 1", "(10, 10, 5, 20)", "is empty", "x1,y1,x2,y2")


# ------------------------------------------------------------------ matching


def test_matching_a_case_worked_by_hand() -> None:
    """A (cat) is found twice, the better-scored detection takes it; B (dog) is only seen as a cat: missed."""
    true_boxes, true_labels = [[0, 0, 10, 10], [20, 20, 30, 30]], [1, 2]
    boxes = [[0, 0, 10, 8], [20, 20, 30, 30], [0, 0, 10, 10]]  # a duplicate (IoU 0.8), the wrong class on B, A itself
    found = match_detections(boxes, [1, 1, 1], [0.8, 0.7, 0.9], true_boxes, true_labels)
    assert found == Matching(match=[None, None, 0], iou=[pytest.approx(0.8), 0.0, 1.0], missed=[1])
    assert (found.tp, found.fp, found.fn) == (1, 2, 1)


def test_matching_thresholds_classes_the_model_lacks_and_empty_inputs() -> None:
    half = match_detections([[0, 0, 10, 10]], [1], [0.5], [[0, 0, 20, 5]], [1], iou=0.5)  # 50 / (100 + 100 - 50): 1/3
    assert half.match == [None] and half.iou == [pytest.approx(1 / 3)]
    exact = match_detections([[0, 0, 10, 10]], [1], [0.5], [[0, 0, 10, 20]], [1], iou=0.5)  # IoU exactly 0.5 matches
    assert exact.match == [0]
    unknown = match_detections([[0, 0, 10, 10]], [-1], [0.9], [[0, 0, 10, 10]], [-1])
    assert (unknown.tp, unknown.fp, unknown.fn) == (0, 1, 1)
    assert match_detections(np.zeros((0, 4)), [], [], [[0, 0, 1, 1]], [3]) == Matching([], [], [0])
    assert match_detections([[0, 0, 1, 1]], [3], [1.0], [], []) == Matching([None], [0.0], [])


def _iou_xywh(dt: list[float], gt: list[float]) -> float:
    """pycocotools' maskApi bbIou for one non-crowd pair, on [x, y, w, h]."""
    width = min(dt[0] + dt[2], gt[0] + gt[2]) - max(dt[0], gt[0])
    height = min(dt[1] + dt[3], gt[1] + gt[3]) - max(dt[1], gt[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    return inter / (dt[2] * dt[3] + gt[2] * gt[3] - inter)


def _coco_loop(
    boxes: np.ndarray, labels: np.ndarray, scores: np.ndarray, true_boxes: np.ndarray, true_labels: np.ndarray, t: float
) -> tuple[list[int | None], list[int]]:
    """COCOeval.evaluateImg's matching, per category, transcribed (no crowds, no ignored boxes, no detection cap)."""
    match: list[int | None] = [None] * len(boxes)
    taken = [False] * len(true_boxes)
    xywh = lambda b: [b[0], b[1], b[2] - b[0], b[3] - b[1]]  # noqa: E731
    for category in set(labels.tolist()) | set(true_labels.tolist()):
        gt = [g for g in range(len(true_boxes)) if true_labels[g] == category and category >= 0]
        dt = [d for d in range(len(boxes)) if labels[d] == category]
        dt = [dt[i] for i in np.argsort([-scores[d] for d in dt], kind="mergesort")]
        for d in dt:
            iou, m = min([t, 1 - 1e-10]), -1
            for g in gt:
                if taken[g]:
                    continue
                overlap = _iou_xywh(xywh(boxes[d]), xywh(true_boxes[g]))
                if overlap < iou:
                    continue
                iou, m = overlap, g
            if m > -1:
                taken[m], match[d] = True, m
    return match, [g for g in range(len(true_boxes)) if not taken[g]]


def _pycocotools_loop(
    boxes: np.ndarray, labels: np.ndarray, scores: np.ndarray, true_boxes: np.ndarray, true_labels: np.ndarray, t: float
) -> tuple[int, int, int]:
    """tp, fp, fn by pycocotools itself: one image, every box, one threshold, no area ranges."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    xywh = lambda b: [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]  # noqa: E731
    ground = COCO()
    ground.dataset = {
        "images": [{"id": 1, "width": 100, "height": 100}],
        "categories": [{"id": c} for c in range(-1, 4)],
        "annotations": [
            {"id": i + 1, "image_id": 1, "category_id": int(c), "bbox": xywh(b), "area": 1.0, "iscrowd": 0}
            for i, (b, c) in enumerate(zip(true_boxes, true_labels))
        ],
    }
    ground.createIndex()
    results = [{"image_id": 1, "category_id": int(c), "bbox": xywh(b), "score": float(s)} for b, c, s in zip(boxes, labels, scores)]
    evaluation = COCOeval(ground, ground.loadRes(results) if results else COCO(), "bbox")
    evaluation.params.iouThrs, evaluation.params.areaRng, evaluation.params.maxDets = np.array([t]), [[0, 1e10]], [1000]
    evaluation.params.areaRngLbl = ["all"]
    evaluation.evaluate()
    tp = fp = fn = 0
    for image in evaluation.evalImgs:
        if image is None:
            continue
        matched = image["dtMatches"][0]
        tp, fp = tp + int((matched > 0).sum()), fp + int((matched == 0).sum())
        gt_matched = image["gtMatches"][0]
        fn += int((gt_matched == 0).sum()) if image["category_id"] >= 0 else 0
    return tp, fp, fn + int((true_labels < 0).sum())


def test_matching_agrees_with_pycocotools_greedy_loop_on_random_images() -> None:
    """Integer boxes on a small grid and few distinct scores: equal IoUs and equal scores, the ties the rule must break alike."""
    rng = np.random.default_rng(0)
    with_pycocotools = importlib.util.find_spec("pycocotools") is not None
    for _ in range(300):
        k, t = int(rng.integers(0, 9)), int(rng.integers(0, 7))
        corners = lambda n: np.sort(rng.integers(0, 12, (n, 2, 2)), axis=1).reshape(n, 4)[:, [0, 2, 1, 3]] + [0, 0, 1, 1]  # noqa: E731
        boxes, true_boxes = corners(k).astype(float), corners(t).astype(float)
        labels, true_labels = rng.integers(0, 3, k), rng.integers(-1, 3, t)
        scores = rng.integers(0, 4, k) / 4
        threshold = float(rng.choice([0.1, 0.3, 0.5, 0.75]))
        found = match_detections(boxes, labels, scores, true_boxes, true_labels, iou=threshold)
        assert (found.match, found.missed) == _coco_loop(boxes, labels, scores, true_boxes, true_labels, threshold)
        if with_pycocotools:
            assert (found.tp, found.fp, found.fn) == _pycocotools_loop(boxes, labels, scores, true_boxes, true_labels, threshold)
