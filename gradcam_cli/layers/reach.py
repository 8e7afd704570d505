"""Whether the class score depends on a layer's positions, by one probe pass, and the layer to take when it does not.

A class-token head reads its last block's patch tokens only through that
block's attention: the block's output gets a gradient at the class token
alone, and its Grad-CAM is blank. A module that returns a tuple hands hooks
its first element, which need not be the one the head reads (TNT's inner
pixel tokens, PiT's patch map beside its class tokens). Then the layer is
the input of the last attention the class token queries: the last
normalization layer, finishing no later, whose positions the score depends
on (`blocks.-1.norm1` in a ViT, `norm_out` in TNT, `norm14` in CoaT's last
parallel block), as the ViT rule of the hubs already picks.
"""

from __future__ import annotations

from collections.abc import Callable

from gradcam_cli.errors import LayerError, LayoutError
from gradcam_cli.layers.paths import ResolvedLayer
from gradcam_cli.layout import LayoutHints, channels_dim_hint, detect_layout, patch_grid
from gradcam_cli.model.blocks import is_norm
from gradcam_cli.model.outputs import pick_scores
from gradcam_cli.model.state import eval_mode, first_tensor, frozen_parameters

import torch
from torch import nn

PROBE_SEED = 0


def pools_a_class_token(model: nn.Module) -> bool:
    """The head reads a class token, as the model says: timm's global_pool='token', prefix tokens, a cls_token."""
    if getattr(model, "global_pool", None) == "token":
        return True
    prefix = getattr(model, "num_prefix_tokens", None)
    if isinstance(prefix, int) and prefix >= 1:
        return True
    return any(name.startswith("cls_token") for name, _ in model.named_parameters(recurse=False))


def reaching_layer(model: nn.Module, layer: ResolvedLayer, input_hw: tuple[int, int], model_name: str = "the model") -> str:
    """`layer.path` when the top score depends on more than one of its positions; else the last normalization layer of
    a token sequence, finishing no later (anywhere, when the layer never ran), that it does depend on; LayerError when
    there is none. Only token sequences: the norms of an attention's q, k and v (MViTv2's) are (N, heads, tokens, d)."""
    watched = {name: module for name, module in model.named_modules() if name and is_norm(module)}
    watched[layer.name] = layer.module
    outputs, score = _probe(model, watched, input_hw)
    ran = list(outputs)
    before = ran[: ran.index(layer.name)] if layer.name in outputs else ran
    candidates = [name for name in [layer.name, *reversed(before)] if name in outputs]
    if candidates and score.requires_grad:
        grads = torch.autograd.grad(score, [outputs[name] for name in candidates], allow_unused=True)
        for name, grad in zip(candidates, grads):
            if grad is None or (name != layer.name and grad.dim() != 3):
                continue
            if _positions(model, watched[name], grad, input_hw) > 1:
                return layer.path if name == layer.name else name
    raise LayerError(
        f"the class score of {model_name} depends on no position of its default layer '{layer.name}' "
        "(its head reads a class token), nor of a normalization layer before it",
        hint=f"name a layer whose positions it reads with ⟨layers⟩ (see: gradcam layers {model_name})",
    )


def _probe(model: nn.Module, watched: dict[str, nn.Module], input_hw: tuple[int, int]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """One forward of a seeded random image: the watched modules' outputs in finishing order, and the top score."""
    outputs: dict[str, torch.Tensor] = {}

    def hook_for(name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, inputs: tuple[object, ...], output: object) -> None:
            tensor = first_tensor(output)  # what the recorder would take
            outputs.pop(name, None)  # a reused module counts at its last call
            # an input handed through (CoaT's parallel blocks return their x1 as it came) is an earlier layer's map
            if tensor is not None and tensor.requires_grad and not any(tensor is given for given in inputs):
                outputs[name] = tensor

        return hook

    parameter = next(iter(model.parameters()), None)
    x = torch.randn(1, 3, *input_hw, generator=torch.Generator().manual_seed(PROBE_SEED))
    if parameter is not None:
        x = x.to(parameter.device, parameter.dtype if parameter.is_floating_point() else x.dtype)
    handles = [module.register_forward_hook(hook_for(name)) for name, module in watched.items()]
    try:
        with eval_mode(model), torch.inference_mode(False), torch.enable_grad(), frozen_parameters(model):
            scores, _ = pick_scores(model(x.requires_grad_(True)))
    finally:
        for handle in handles:
            handle.remove()
    return outputs, scores.reshape(scores.shape[0], -1)[0].max()


def _positions(model: nn.Module, module: nn.Module, grad: torch.Tensor, input_hw: tuple[int, int]) -> int:
    """How many grid positions of one layer output get a gradient, read in the layout a run would read it."""
    if grad.dim() not in (3, 4) or grad.shape[0] != 1:
        return 0  # no map of the one image (windows, inner pixel tokens)
    hints = LayoutHints(getattr(model, "num_prefix_tokens", None), None, channels_dim_hint(module), patch_grid(model, input_hw))
    try:
        layout = detect_layout(tuple(grad.shape), input_hw, hints)
    except LayoutError:
        return 0
    return int((layout.to_nchw(grad)[0].abs().sum(0) > 0).sum())
