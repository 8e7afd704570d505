"""Cards whose map explains a score, not a class's probability: a CLIP-style model's prompt, an embedding model's
reference images, a regression's output (records' `target`: prompt, reference, regression).

Such a record has no probability and no top-k, so its cards have no predicted
class, no right or wrong and no place in a confusion matrix. A card says its
score as the record gives it: a prompt's, the similarity as the model scores
the image-text pair (its logit scale times the cosine); a reference's, the
cosine similarity of the image's embedding to the references'; a regression's,
the output's value. A prompt's card also lists the image's other prompts with
their scores, and says whether its own is the image's best match; a
reference's card shows each reference image (a thumbnail, linked to the file
as the overlays are: report/build.py places them).

The table per prompt (reference set, output), in place of the classes table:
the images each was scored on, how often it was the image's best match, its
mean, lowest and highest score.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gradcam_cli.report.check import is_number

SCORED = ("prompt", "reference", "regression")  # the kinds of target whose map explains a score (vocab.TargetKind)


def target_kind(record: dict[str, Any]) -> str | None:
    """What the record's maps explain (vocab.TargetKind's value), without a `, negative`; None where it does not say."""
    target = record.get("target")
    return (target.split(",")[0].strip() or None) if isinstance(target, str) else None


def is_scored(record: dict[str, Any]) -> bool:
    """A prompt's, a reference's or a regression's record: scores to say, no probability."""
    return target_kind(record) in SCORED


def scored_fields(record: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """What a scored card holds beyond a classifier's: its score, the image's prompts ranked (several prompts) and
    whether its own is the best match, the reference images' paths as the record gives them (not yet located)."""
    kind = target_kind(record)
    fields: dict[str, Any] = {"score": target.get("score"), "probability": None}
    if kind == "prompt":
        ranked = _ranked(record.get("targets") or [])
        fields["prompt_scores"] = ranked if len(ranked) > 1 else []
        fields["best"] = ranked[0]["index"] == target.get("class_index") if len(ranked) > 1 else None
    elif kind == "reference":
        fields["_references"] = list(record.get("references") or [])
    return fields


def _ranked(targets: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The image's prompts with a score, the highest first (the order given where two tie)."""
    scored = [target for target in targets if is_number(target.get("score"))]
    ranked = sorted(scored, key=lambda target: -target["score"])
    return [{"index": target.get("class_index"), "name": target.get("class_name"), "score": target["score"]} for target in ranked]


def score_table(cards: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """Per prompt (reference set, regression output): the images scored against it, how often it was their best match,
    its mean, lowest and highest score; the most best matches first, then the highest mean. None: no scored card."""
    rows: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for card in cards:
        if not card["ok"] or card.get("target") not in SCORED:
            continue
        key = (card["target"], card["class_name"], card["class_index"])
        fresh = {"target": key[0], "class_name": key[1], "class_index": key[2], "best": 0, "_images": set(), "_scores": []}
        row = rows.setdefault(key, fresh)
        row["_images"].add((card["model"], card["input"]))
        row["best"] += card.get("best") is True
        if is_number(card.get("score")):
            row["_scores"].append(card["score"])
    if not rows:
        return None
    table = [_figures(row) for row in rows.values()]
    table.sort(key=lambda row: (-row["best"], -(row["mean"] if row["mean"] is not None else -float("inf"))))
    kinds = sorted({row["target"] for row in table})
    return {"kinds": kinds, "ranked": any(row["best"] for row in table), "rows": table}


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    scores, row["images"] = row.pop("_scores"), len(row.pop("_images"))
    row["mean"] = round(sum(scores) / len(scores), 6) if scores else None
    row["min"], row["max"] = (min(scores), max(scores)) if scores else (None, None)
    return row
