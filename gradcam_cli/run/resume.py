"""--skip-existing: which inputs an earlier run with this run's settings already finished, judged by the files.

An output counts as done when it is whole and made with this run's settings
(its stamp says so; a picture from before stamps, what the folder's records
say; one that nothing speaks for, as ever, by its being there). One that
another model, method, layer, weights or style made is not this run's output:
the image is explained again, and the writer then refuses to write over it
unless ⟨replace⟩ (outputs/provenance.py), so it is never kept silently.
"""

from __future__ import annotations

from pathlib import Path, PurePath

from gradcam_cli.cams.targets import TargetChoice
from gradcam_cli.outputs.files import is_complete
from gradcam_cli.outputs.naming import OutputNamer
from gradcam_cli.outputs.provenance import Provenance


def existing_outputs(
    namer: OutputNamer, targets: TargetChoice | None, base: PurePath, provenance: Provenance, *, save_raw: bool, save_guided: bool
) -> list[Path] | None:
    """This run's own overlays when every file it would write is there, whole, else None.

    With --topk K the classes are known only after the forward: any K
    classes whose files are all complete will do. With --multilabel, so are
    the labels and their number: one complete label will do (an image with no
    label above the threshold wrote nothing, and is explained again).
    """
    classes: list[int | None]
    if targets is None:  # another task than classes (a detector's): its one picture per image stands for its files
        classes, wanted = [None], 1
    elif targets.by_threshold or (targets.topk > 1 and not targets.classes):
        classes = list(namer.existing_classes(base))
        wanted = 1 if targets.by_threshold else targets.topk
    else:
        classes, wanted = [*targets.classes] or [None], len(targets.classes or [None])
    complete = []
    for index in classes:
        paths = [p for p in namer.paths(base, index, save_raw, save_guided) if p is not None]
        if all(is_complete(p) for p in paths) and not any(provenance.others(p) for p in paths if p.suffix == ".png"):
            complete.append(paths[0])
    if targets is not None and targets.by_threshold:
        return complete or None
    return complete[:wanted] if len(complete) >= wanted else None
