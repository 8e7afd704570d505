"""The matching of a detector's boxes to the true ones.

Checked on a case worked by hand and against pycocotools' greedy loop:
pycocotools itself when it is installed (it is no dependency), and a plain
transcription of its `evaluateImg` loop here either way.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from gradcam_cli.evaluate.matching import Matching, match_detections


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
