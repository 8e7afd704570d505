"""Tiny transformers CLIP, SigLIP, SigLIP 2 and DINOv2 models written to a folder with save_pretrained, random weights, no network.

Each folder is what `hf:/that/dir` loads: the config and weights, an image processor, and (CLIP and SigLIP) a tokenizer
built from files written here. CLIP's and SigLIP 2's are their own classes (CLIPTokenizer over a tiny BPE vocabulary and
merges, Siglip2Tokenizer, Gemma's BPE, over another). SigLIP's own tokenizer is a sentencepiece model, and the
sentencepiece package is not among the test extras, so its folder holds a word-level tokenizer made with the
`tokenizers` library (what AutoTokenizer reads from a tokenizer.json), shaped as SigLIP's is: `</s>` closes each text
and pads it, and it gives only the ids.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

WORDS = ("a", "photo", "of", "the", "dog", "cat", "ball", "square", "circle", "red", "blue")
CLIP_SPECIAL = ("<|startoftext|>", "<|endoftext|>")
TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
IMAGE = 32
PATCH = 8
TEXT_LENGTH = 16


def tiny_hf_clip(folder: Path) -> Path:
    """A CLIPModel (a 32x32 image tower of 8x8 patches, a 16-token text tower), its CLIPTokenizer and CLIPImageProcessor."""
    import torch
    import transformers

    vocab, merges = _clip_bpe()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))  # the files a CLIP repository ships beside its tokenizer.json
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(pair) for pair in merges) + "\n")
    tokenizer = transformers.CLIPTokenizer(
        vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"), model_max_length=TEXT_LENGTH
    )
    ids = {"bos_token_id": vocab["<|startoftext|>"], "eos_token_id": vocab["<|endoftext|>"], "pad_token_id": vocab["<|endoftext|>"]}
    config = transformers.CLIPConfig(
        vision_config={**TOWER, "image_size": IMAGE, "patch_size": PATCH},
        text_config={**TOWER, "vocab_size": len(vocab), "max_position_embeddings": TEXT_LENGTH, **ids},
        projection_dim=16,
    )
    torch.manual_seed(0)
    model = transformers.CLIPModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE}).save_pretrained(folder)
    return folder


def tiny_hf_siglip(folder: Path) -> Path:
    """A SiglipModel (towers as CLIP's), a learnt scale and bias that are not the defaults, a word-level tokenizer."""
    import torch
    import transformers

    tokenizer = _word_tokenizer()
    ids = {"bos_token_id": None, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    config = transformers.SiglipConfig(
        vision_config={**TOWER, "image_size": IMAGE, "patch_size": PATCH},
        text_config={**TOWER, "vocab_size": len(tokenizer), "max_position_embeddings": TEXT_LENGTH, **ids},
    )
    torch.manual_seed(0)
    model = transformers.SiglipModel(config)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(10.0))
        model.logit_bias.fill_(-2.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformers.SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE}).save_pretrained(folder)
    return folder


def tiny_hf_siglip2(folder: Path) -> Path:
    """A Siglip2Model (NaFlex: its image as patches, at most 16 of 8x8, so a 32x32 square) and its own tokenizer class."""
    import torch
    import transformers

    tokenizer = _siglip2_tokenizer()
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    config = transformers.Siglip2Config(
        vision_config={**TOWER, "num_patches": (IMAGE // PATCH) ** 2, "patch_size": PATCH},
        text_config={**TOWER, "vocab_size": len(tokenizer), "max_position_embeddings": TEXT_LENGTH, **ids},
    )
    torch.manual_seed(0)
    model = transformers.Siglip2Model(config)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(10.0))
        model.logit_bias.fill_(-2.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformers.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=(IMAGE // PATCH) ** 2).save_pretrained(folder)
    return folder


def tiny_hf_dinov2(folder: Path) -> Path:
    """A Dinov2Model without a head, saved as such (its config's architectures: ["Dinov2Model"]), no image processor."""
    import torch
    import transformers

    config = transformers.Dinov2Config(**TOWER, image_size=IMAGE, patch_size=PATCH, architectures=["Dinov2Model"])
    torch.manual_seed(0)
    transformers.Dinov2Model(config).save_pretrained(folder)
    return folder


def _bpe(symbols: list[str], words: list[list[str]]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A BPE vocabulary of the symbols and every piece the words are built of, and the merges that build each word from
    its symbols, left to right."""
    tokens, merges = list(symbols), []
    for pieces in words:
        while len(pieces) > 1:
            merge = (pieces[0], pieces[1])
            merges += [merge] if merge not in merges else []
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
            tokens += [pieces[0]] if pieces[0] not in tokens else []
    return {token: index for index, token in enumerate(tokens)}, merges


def _clip_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's BPE over WORDS: every letter alone and word-final (`a</w>`), each word built up to its `word</w>`."""
    letters = [letter + end for letter in "abcdefghijklmnopqrstuvwxyz" for end in ("", "</w>")]
    return _bpe([*CLIP_SPECIAL, *letters], [[*word[:-1], word[-1] + "</w>"] for word in WORDS])


def _siglip2_tokenizer() -> Any:
    """SigLIP 2's own tokenizer class (Gemma's BPE, lower-cased, `▁` for a space, padded on the left) over WORDS."""
    import transformers

    vocab, merges = _bpe(
        ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "▁", *"abcdefghijklmnopqrstuvwxyz"], [[*word, "▁"] for word in WORDS]
    )
    return transformers.Siglip2Tokenizer(vocab=vocab, merges=merges, model_max_length=TEXT_LENGTH)


def _word_tokenizer() -> Any:
    """A word-level tokenizer in SigLIP's shape: lower-cased words, `</s>` after each text and as its padding, ids only."""
    import transformers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {token: index for index, token in enumerate(("<pad>", "</s>", "<unk>", *WORDS))}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.normalizer = normalizers.Lowercase()
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", vocab["</s>"])])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=words, pad_token="</s>", eos_token="</s>", unk_token="<unk>",
                                                model_max_length=TEXT_LENGTH, model_input_names=["input_ids"])  # fmt: skip
