"""The page itself: static assets copied beside the data, which goes in a plain script file.

Browsers refuse `fetch()` of a local JSON file and ES modules from file://, so
the data is `data.js`, one assignment to `window.GRADCAM_REPORT`, loaded by a
classic <script> before `app.js` (and `segments.js`, a segmenter's cards and
table, and `scores.js`, the cards and table of prompts, references and
regression outputs, and `videos.js`, a video's and a volume's cards, which app.js calls). The shape of that object is `REPORT_SCHEMA` below;
the scripts read nothing else.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from gradcam_cli.outputs.files import write_atomic

ASSETS = ("index.html", "app.js", "segments.js", "scores.js", "videos.js", "style.css")

REPORT_SCHEMA = """
window.GRADCAM_REPORT = {
  header: {
    generated: "2026-12-01T15:20:00Z",           // when the report was built (UTC, ISO 8601)
    version: "0.x",                              // gradcam's version that built the report
    runs: [{                                     // one per run whose records are in the report (runs.jsonl)
      command: "gradcam explain val -r ...",     // the command line, as typed (null when unknown)
      started: "ISO", finished: "ISO"|null, interrupted: bool,
      model: "resnet50", weights: "path"|null, weights_sha256: "hex"|null, pretrained: bool|null,  // null: your code's
      method: "gradcam", layers: ["layer4"], version: "0.x", device: "cpu", shard: "0/4"|null,
      colormap: "jet"|null, norm: "minmax"|"none"|null,   // as the command line says them for sure (report/legend.py)
    }],
    legend: [{                                   // the overlays' colour scales, maybe [] (unknown): one per colour map and norm
      colormap: "jet", stops: ["#000080", ...],  // the colours from low (0) to high (1), evenly spaced
      norm: "minmax"|"none"|null,                // what the .npy files hold; the pictures scale every map to its range
      runs: [1, 2],                              // the runs (numbered from 1 as listed) drawn with it; [] for all
    }],
    models: ["resnet50"], methods: ["gradcam"], layers: ["layer4"],   // distinct values over the cards
    counts: {images, cards, failed, blank, skipped, with_truth, correct, wrong,  // images: distinct inputs (a video once)
             videos, frames, volumes, slices},   // only with videos or volumes: their cards; the frames, slices explained
                                                 // (a volume through a 3-D model at once: no slice)
    has_truth: bool,                             // some card has a true class: the page opens on the wrong ones
    metrics: ["deletion_auc", ...],              // names of the numeric card metrics present (sortable), maybe []
    detection: null | {                          // a detector's cards are here (report/detections.py): the table per class
      has_truth: bool,                           // some detection or missed object is judged: tp, fp, precision, recall
      classes: [{class_name: "star"|null, class_index: 3|null,  // the most errors first (with truth), else the most found
                 detections: 3, tp: 2, fp: 1, fn: 1,            // kept; true and false positives; missed objects
                 energy_in_box: 0.87|null,                      // the mean share of a detection's map inside its box
                 precision: 0.67|null, recall: 0.67|null}],     // null: no truth, or nothing to divide by
      all: {detections, tp, fp, fn, energy_in_box, precision, recall},  // the same over every class
    },
    segmentation: null | {                       // a segmenter's cards are here (report/segments.py): the table per class
      has_truth: bool,                           // some record has the truth's overlap: IoU, Dice, missed regions and pixels
      classes: [{class_name: "cat"|null, class_index: 8,        // the lowest IoU first (with truth), else the most regions
                 images: 3,                                      // images where the model or the truth gives it a pixel
                 regions: 2, missed: 1,                          // regions explained (missed ones apart); missed regions
                 area_fraction: 0.12|null, mean_probability: 0.9|null, energy_in_region: 0.8|null,  // means over its regions
                 iou: 0.7|null, dice: 0.8|null,                  // means over its images (null: no truth)
                 missed_area: 1024|null}],                       // pixels the truth gives it and the model another, in all
      all: {images, regions, missed, area_fraction, mean_probability, energy_in_region,  // the same over every region
            iou, dice, missed_area},             // iou, dice: the mean of the classes' means; missed_area: the sum
    },
    scores: null | {                             // cards whose map explains a score (report/scores.py): the table per prompt
      kinds: ["prompt"],                         // the kinds of target among them: "prompt", "reference", "regression"
      ranked: bool,                              // some image was scored against several prompts: best matches counted
      rows: [{target: "prompt", class_name: "a dog"|null, class_index: 0,  // a prompt (the references, an output)
              images: 3,                         // images scored against it
              best: 2,                           // images where it scored highest of their prompts
              mean: 27.3|null, min: 25.1|null, max: 29.0|null}],  // its scores; the most best matches first, then the mean
    },
  },
  cards: [{                                      // one per (image, explained class); a failed image: one card, ok false;
                                                 // a video, a volume: one card for all its frames, slices (report/videos.py)
    id: 0,                                       // position, stable
    kind: "image"|"detection"|"missed"|"empty"|"segment"|"video"|"volume",  // a classifier's card; a detector's: one per kept
                                                 // detection, one
                                                 // per missed object, one for an image with neither ("empty": its whole
                                                 // picture); a segmenter's: one per region ("segment")
    input: "val/cat/1.jpg", name: "1.jpg",       // the input as the run named it; its file name (search)
    ok: true, error: null|"message",
    class_index: 281|null, class_name: "tabby"|null,  // the explained class
    probability: 0.93|null,                      // of the explained class
    predicted: "tabby"|null, predicted_index: 281|null,  // the model's top-1
    margin: 0.71|null,                           // top-1 minus top-2 probability
    topk: [{index, name, probability}],
    true_class: "tabby"|null, correct: true|false|null,  // ground truth when known: top-1 == truth
    blank: false, method: "gradcam", layers: ["layer4"], model: "resnet50",
    target: "class"|"prompt"|"reference"|"regression"|...|null,  // what the record's maps explain (vocab.TargetKind)
    thumb: "thumbs/0.jpg"|null, overlay_thumb: "thumbs/0o.jpg"|null,  // relative to the report folder
    thumb_w: 256, thumb_h: 192,                  // the thumbnails' size in pixels (both share it)
    original: "../../val/cat/1.jpg"|null,        // full-size files, relative to the report folder, plain text (the page encodes)
    overlay: "../1_gradcam.png"|null, npy: "../1_gradcam.npy"|null,
    replaced: true|absent,                       // a later run with other settings wrote over its picture: none shown
    metrics: {deletion_auc: 0.12, ...},          // numeric, maybe {}
    // a detector's cards ("detection", "missed") also hold, the explained class being the detected (or true) one:
    rank: 0, box: [x1, y1, x2, y2],              // its place in the record's list; its box in the photo's pixels
    score: 0.93|null,                            // the detector's score (null: a missed object)
    match: "tp"|"fp"|"fn"|null, iou: 0.91|null,  // with truth: matched or not, missed ("fn"); its IoU with a true box
    energy_in_box: 0.87|null, peak_in_box: true|null,  // the share of its map inside its box; its peak in it
    candidate_box, candidate_score, candidate_iou,     // a missed object's: the best candidate of its class, or null
    own_overlay: bool,                           // overlay is its own picture (--each), else the image's picture
    picture: "../x.png.hirescam.png"|null,       // the image's picture with every box, when overlay is its own
                                                 // thumb and overlay_thumb: the box cut from the photo and from the map
    // a segmenter's cards ("segment") also hold, the explained class being the region's (null: an image with no region):
    rank: 0, region: "predicted"|"box"|"mask"|"truth"|"missed"|null,  // its place in the record's list; its kind
    area: 1024, area_fraction: 0.06,             // its pixels on the photo; its share of the photo
    score: 240.2, mean_probability: 0.94,        // the class's score summed over it (what the map explains); its mean probability
    energy_in_region: 0.94|null,                 // the share of its map's energy inside it (null: a blank map)
    iou: 0.5|null, dice: 0.67|null, missed_area: 1024|null,  // with truth: the class's, over the photo
    own_overlay: bool, picture,                  // as a detector's: its own overlay (--each), else the image's picture
                                                 // (every region outlined); thumb and overlay_thumb: the whole pictures
    // a card whose target is "prompt", "reference" or "regression" (report/scores.py): no probability, no top-k, and
    score: 27.3|null,                            // a prompt's similarity as the model scores the pair (logit scale x
                                                 // cosine), a reference's cosine similarity, a regression's value
    best: true|false|null, prompt_scores: [{index, name, score}],  // a prompt's: its image's best match (null: one prompt); the
                                                 // image's prompts, the highest score first ([]: one prompt)
    references: [{input: "ref.png", name: "ref.png",  // a reference's: each reference image as the run was given it,
                  original: "../../ref.png"|null,  // linked relative to the report folder (null: not found),
                  thumb: "thumbs/x.jpg"|null, thumb_w: 256, thumb_h: 192}],  // its thumbnail
    // a video's and a volume's card ("video", "volume"): the class most of its frames (slices) explain, probability,
    // topk and margin its most confident frame's (slice's), predicted the top-1 most of them have, correct that top-1's
    count: 12, best: 7,                          // its explained frames (slices); the most confident one's frame (slice) index
    classes: [{class_name, class_index, count}], // the explained classes over its frames (slices), the most frequent first
    original: "../../clip.mp4", overlay: "../clip.mp4.gradcam.mp4"|null,  // the input; its overlay video (a volume: montage)
    overlay_thumb: "thumbs/x.jpg"|null,          // the best key frame's thumbnail (a volume: the montage's); thumb: null
    strip: [{position: 7, frame: 7, time: 0.58, clip: null|2,  // a video's key frames: its place in the overlay video,
             class_name, class_index, probability,            // its frame index and time; its explained class
             best: true, change: false,                       // the most confident frame; the class changes here
             thumb: "thumbs/x.jpg"|null, thumb_w: 192, thumb_h: 144}],
    strip_note: null|"no key frames: PyAV is not installed ...",  // why a video card has no strip, one line
    duration: 0.92|null,                         // a video's last explained frame's time, in seconds
    nifti: "../scan.nii.gz.gradcam.nii.gz"|null, intensity: "window 40,400"|null,  // a volume's map volume; its scaling
    whole: true|false,                           // a volume's: one record of the whole volume (a 3-D model), no slices
  }],
}
"""


def write_page(report_dir: Path, data: dict[str, Any]) -> Path:
    """Write index.html, app.js, style.css and data.js into `report_dir`; return the index's path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    assets = resources.files("gradcam_cli.report") / "assets"
    for name in ASSETS:
        write_atomic(report_dir / name, (assets / name).read_bytes())
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    # JSON.parse of one string literal parses faster than a JS object literal (a third less at 10,000 cards);
    # "</" escaped, so the file could be inlined in a <script> element and still be the same value
    literal = json.dumps(text, ensure_ascii=False).replace("</", "<\\/")
    write_atomic(report_dir / "data.js", f"window.GRADCAM_REPORT = JSON.parse({literal});\n".encode())
    return report_dir / "index.html"
