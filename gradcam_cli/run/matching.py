"""Prompts and reference images: what a CLIP-style or embedding model's maps explain, turned into a model that scores.

Before any image is read, the texts (⟨prompt⟩, ⟨prompt_file⟩, or ⟨labels⟩ through ⟨template⟩) or the reference images
(⟨reference⟩) are embedded once, on the run's device, and the model becomes a view scoring each image against them
(model/towers.similarity_view): prompts and zero-shot labels as the model scores an image-text pair, references by the
cosine of the embeddings (several averaged into one concept). The engine then differentiates a similarity as it does
a class score; a zero-shot classifier is a classifier, every part built for one works unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gradcam_cli.errors import GradcamError, InputError, ModelError, UsageError
from gradcam_cli.geometry import plan_geometry, to_input_array
from gradcam_cli.inputs.decode import load_image
from gradcam_cli.model.faults import fault_line
from gradcam_cli.model.load import LoadedModel
from gradcam_cli.model.outputs import view_output
from gradcam_cli.model.state import eval_mode
from gradcam_cli.model.towers import Embed, Matched, similarity_view
from gradcam_cli.settings import ExplainSettings, TargetSettings

DEFAULT_TEMPLATE = "a photo of a {}."
MAX_PROMPT_CHARS = 1000  # a prompt is a sentence; a longer line is a file read by mistake
REFERENCE_BATCH = 16  # reference images embedded this many at a time
TEXT_BATCH = 256  # prompts embedded this many at a time


def matched(loaded: LoadedModel, settings: ExplainSettings, device: torch.device) -> LoadedModel:
    """The model as the target options make it score: against prompts, labels' prompts or references; else as it is
    (also a model made to score already: `gradcam eval` prepares each method's run on the one model)."""
    if loaded.matched is not None:
        return loaded
    target = settings.target
    prompts = read_prompts(target)
    _check(loaded, target, prompts)
    if prompts:
        return _scoring_texts(loaded, Matched("prompt", prompts, prompts), device)
    if target.references:
        return _scoring_references(loaded, target.references, settings, device)
    if loaded.towers is not None:
        template = DEFAULT_TEMPLATE if target.template is None else target.template
        labels = tuple(loaded.class_names or ())
        return _scoring_texts(loaded, Matched("classify", labels, tuple(template.format(label) for label in labels)), device)
    return loaded


def read_prompts(target: TargetSettings) -> tuple[str, ...]:
    """⟨prompt⟩s, then ⟨prompt_file⟩'s lines (blank ones and `#` comments left out); an empty prompt is refused."""
    prompts = [text.strip() for text in target.prompts]
    if target.prompt_file is not None:
        prompts += _file_prompts(target.prompt_file)
    for text in prompts:
        if not text:
            raise UsageError("⟨prompts⟩: a prompt is empty; give the text the image is compared with, e.g. ⟨prompts='a dog'⟩")
        if len(text) > MAX_PROMPT_CHARS:
            raise UsageError(f"⟨prompts⟩: a prompt of {len(text):,} characters; a prompt is a sentence (at most {MAX_PROMPT_CHARS:,})")
    return tuple(prompts)


def _file_prompts(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"⟨prompt_file={path}⟩: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"⟨prompt_file={path}⟩: not UTF-8 text; save it as UTF-8, one prompt per line") from None
    except OSError as error:
        raise UsageError(f"⟨prompt_file={path}⟩: cannot read it ({error.strerror or type(error).__name__})") from None
    lines = [line.strip() for line in text.splitlines()]
    prompts = [line for line in lines if line and not line.startswith("#")]
    if not prompts:
        raise UsageError(f"⟨prompt_file={path}⟩ has no prompt; write one per line")
    return prompts


def _check(loaded: LoadedModel, target: TargetSettings, prompts: tuple[str, ...]) -> None:
    """The combinations that cannot be, in one line each, before anything is embedded."""
    towers = loaded.towers is not None
    template = target.template
    if prompts and target.references:
        raise UsageError("⟨prompts⟩ compare the image with texts, ⟨references⟩ with images; give one of them")
    if prompts and not towers:
        raise UsageError(f"⟨prompts⟩: {loaded.name} has no text tower; name a CLIP-style model (open_clip:ViT-B-32, "
                         "hf:openai/clip-vit-base-patch32), or compare with images by ⟨references⟩")  # fmt: skip
    if (prompts or target.references) and towers and loaded.class_names:
        raise UsageError("⟨labels⟩ make a CLIP-style model a zero-shot classifier; ⟨prompts⟩ and ⟨references⟩ explain a "
                         "similarity of their own: give one of them")  # fmt: skip
    if template is not None and (not towers or prompts or target.references or not loaded.class_names):
        raise UsageError("⟨template⟩ makes each of the ⟨labels⟩ a prompt of a CLIP-style model: give it with ⟨labels⟩ on such a model")
    if template is not None and template.count("{}") != 1:
        raise UsageError(f"⟨template={template!r}⟩ needs one {{}} where the label goes, e.g. 'a photo of a {{}}.'")
    if towers and not prompts and not target.references and not loaded.class_names:
        raise UsageError(f"{loaded.name} is a CLIP-style model: it scores images against texts. Give ⟨prompts⟩ (one map each), "
                         "⟨labels⟩ (a file of class names: a zero-shot classifier) or ⟨references⟩ (images)")  # fmt: skip


def _scoring_texts(loaded: LoadedModel, matching: Matched, device: torch.device) -> LoadedModel:
    """The model scoring images against texts, as it scores a pair (its logit scale, SigLIP's bias)."""
    towers, model = loaded.towers, loaded.model
    assert towers is not None
    model.to(device)
    chunks = [matching.prompts[i : i + TEXT_BATCH] for i in range(0, len(matching.prompts), TEXT_BATCH)]
    with eval_mode(model), _model_faults(loaded.name, "the prompts' texts", "check the model's text tower and tokenizer"):
        texts = torch.cat([towers.embed_texts(model, chunk, device) for chunk in chunks])  # in chunks: a thousand labels' prompts
    scale, bias = towers.scale_and_bias(model)
    view = similarity_view(model, towers.embed_images, texts, scale, bias)
    return replace(loaded, model=view, class_names=list(matching.names), matched=matching, output=None)


def _scoring_references(loaded: LoadedModel, references: tuple[str, ...], settings: ExplainSettings, device: torch.device) -> LoadedModel:
    """The model scoring images by the cosine of their embedding to the references' mean (each normalised first)."""
    embed: Embed = loaded.towers.embed_images if loaded.towers is not None else view_output
    images = torch.from_numpy(np.stack([_reference_input(Path(path), loaded, settings) for path in references]))
    model = loaded.model
    model.to(device)
    hint = "give the input size the model takes with ⟨input_size⟩ (or ⟨model_kwargs⟩ for its builder)"
    with eval_mode(model), torch.no_grad(), _model_faults(loaded.name, "the reference images", hint):
        parts = [_embedded(embed, model, chunk.to(device), loaded.name) for chunk in images.split(REFERENCE_BATCH)]
    concept = nn.functional.normalize(torch.cat(parts).float(), dim=-1).mean(dim=0, keepdim=True)
    view = similarity_view(model, embed, concept)
    name = Path(references[0]).name if len(references) == 1 else f"{Path(references[0]).name} + {len(references) - 1} more"
    found = Matched("reference", (name,), references=tuple(str(path) for path in references))
    return replace(loaded, model=view, class_names=[name], matched=found)  # `output`: where the embedding was


def _reference_input(path: Path, loaded: LoadedModel, settings: ExplainSettings) -> np.ndarray:
    """A reference image as the model's input, preprocessed as every input of the run is."""
    try:
        photo = load_image(path, settings.inputs.max_pixels)
    except InputError as error:
        raise UsageError(f"⟨references⟩: {error}", hint="give an image file the model can embed") from None
    geometry = plan_geometry(photo.shape[:2], loaded.data_config, crop=settings.inputs.crop)
    return to_input_array(photo, geometry, loaded.data_config)


@contextlib.contextmanager
def _model_faults(name: str, what: str, hint: str) -> Iterator[None]:
    """The model's own failure while it embeds the queries: one line naming it (and the line of the user's code)."""
    try:
        yield
    except GradcamError:
        raise
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the model may raise anything; the user gets one line
        raise ModelError(f"{name} failed to embed {what}: {fault_line(error)}", hint=hint) from error


def _embedded(embed: Embed, model: nn.Module, x: torch.Tensor, name: str) -> torch.Tensor:
    """(N, D) embeddings; a model whose output is no embedding is one line."""
    found = embed(model, x)
    if not isinstance(found, torch.Tensor) or found.dim() != 2:
        shape = tuple(found.shape) if isinstance(found, torch.Tensor) else type(found).__name__
        raise UsageError(
            f"⟨references⟩: {name} must return an embedding (N, D) to compare images by; it returns {shape}",
            hint="pick the embedding with ⟨output=KEY⟩, or build a timm model without its head: ⟨model_kwargs=num_classes=0⟩",
        )
    return found
