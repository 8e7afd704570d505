"""The one option table of `gradcam explain`: every option written once, and how messages spell it.

Each row says an option's flags, default, help, README text, preset key,
kind and checks. The command's flags (cli/options.py), the preset keys and
their converters (cli/presets.py), the README's option table and preset key
list (tools/readme_options.py, checked by tests) and the settings groups
(settings.py) all derive from it. A leaf: torch-free, imported before the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from gradcam_cli.values import (
    parse_channels,
    parse_class,
    parse_grid,
    parse_input_shape,
    parse_kwarg,
    parse_region,
    parse_shard,
    parse_window,
)
from gradcam_cli.vocab import Colormap, Combine, Interpolation, Method, Norm, Plane, Precision, Style, Task, values

DEFAULT_MAX_PIXELS = 100_000_000  # 100 megapixels: a 12,000 x 8,000 photo passes, a decompression bomb does not


@dataclass(frozen=True, kw_only=True)
class Option:
    """One option of `gradcam explain`: how it is spelled, checked, documented and where it lands."""

    name: str  # the explain parameter and the preset key
    flags: tuple[str, ...]  # long flag first; "--on/--off" for a switch pair
    kind: type  # bool, int, float, str, Path, list (repeatable), or an Enum of choices
    default: Any
    help: str  # one line for --help
    doc: str = ""  # the README's words, when --help's line is not enough
    group: str | None = None  # where it lands in ExplainSettings; None: the command line's own
    field: str = ""  # the field in its group, when not `name`
    metavar: str = ""  # what the value is called in the README (and --help for free text)
    aliases: tuple[str, ...] = ()  # further preset keys meaning the same
    minimum: float | None = None
    maximum: float | None = None
    minimum_meaning: str = ""  # what the smallest value does, when it is special (`0 = automatic`)
    path: bool = False  # a file or folder: in a preset, relative to the preset's own folder
    convert: Callable[[str], Any] | None = None

    @property
    def flag(self) -> str:
        return self.flags[0].split("/")[0] if self.flags else self.metavar

    @property
    def preset(self) -> bool:
        return self.group is not None

    @property
    def choices(self) -> list[str] | None:
        return values(self.kind) if isinstance(self.kind, type) and issubclass(self.kind, Enum) else None


# A table, one option per entry, read down the page: the formatter leaves it as written.
# fmt: off
OPTIONS: tuple[Option, ...] = (
    Option(name="inputs", flags=(), kind=list, default=None, metavar="INPUTS",
           help="Images, folders, glob patterns, or - to read paths from stdin (one per line).",
           doc="image files, folders, glob patterns (`'data/**/*.png'`), or `-` for paths on stdin (one per line)"),
    Option(name="model", flags=("--model", "-m"), kind=str, default=None, group="model", field="name", metavar="NAME",
           help="timm name (tags and hf-hub:ORG/NAME work), torchvision:ARCH, hf:ORG/NAME or hf:DIR (transformers), "
                "yolo:best.pt or yolo:yolov8n.yaml (Ultralytics), smp:ARCH?KEY=VALUE&... (segmentation_models_pytorch), "
                "open_clip:NAME[/TAG] (CLIP-style), or your code: path/net.py:build or package.module:build (this runs that code).",
           doc="a timm name (`resnet50`, `resnet50.a1_in1k`, `hf-hub:timm/...`), `torchvision:ARCH`, a transformers "
               "classifier, detector, segmenter, CLIP or SigLIP model, or a headless base model returning an embedding "
               "(`hf:ORG/NAME`, `hf:/saved/dir`; the `[hf]` extra), a "
               "segmentation_models_pytorch segmenter (`smp:Unet?encoder_name=resnet34&classes=3`, its arguments after "
               "`?`; the `[smp]` extra), an open_clip CLIP-style model (`open_clip:ViT-B-32`, its first pretrained tag, or "
               "`open_clip:ViT-B-32/laion2b_s34b_b79k`; the `[clip]` extra; see [Text prompts and reference "
               "images](#text-prompts-and-reference-images)), an Ultralytics YOLO detector "
               "(`yolo:path/to/best.pt` with `--trust-pickle`, or a config, `yolo:yolov8n.yaml`, with random weights; "
               "the `[yolo]` extra), or your own code: "
               "`path/to/net.py:build` or `package.module:build`, a callable returning an `nn.Module` (a class, a "
               "factory) or a module instance, by name. **This imports and runs that code**, as you ask; see "
               "[Your own model](#your-own-model)"),
    Option(name="pretrained", flags=("--pretrained/--no-pretrained",), kind=bool, default=True, group="model",
           help="Load the hub's pretrained weights (ignored with --weights).",
           doc="load the hub's pretrained weights (default) or start from random weights"),
    Option(name="weights", flags=("--weights", "-w"), kind=Path, default=None, group="model", metavar="FILE", path=True,
           help="Local checkpoint (.safetensors, or .pth/.pt/.ckpt state dict); a quoted pattern: each file in turn.",
           doc="your checkpoint: `.safetensors`, or a `.pth`/`.pt`/`.ckpt` state dict (loaded with `weights_only=True`; "
               "pickled code is refused). `state_dict`/`model` wrappers (DomainBed's `model_dict` too), a training "
               "wrapper's prefix (Lightning's `model.`) and `module.` prefixes are unwrapped; the number of classes is read "
               "from the checkpoint's classifier. A quoted pattern (`'ckpts/epoch=*.ckpt'`) sweeps the checkpoints it names: "
               "each explained in turn into its own subfolder, as a step (see [While training](#while-training))"),
    Option(name="ema", flags=("--ema",), kind=bool, default=False, group="model",
           help="Load the checkpoint's EMA weights (timm's state_dict_ema) instead of its weights.",
           doc="with `--weights`: the exponential moving average of the weights the training kept (timm's "
               "`state_dict_ema`, `model_ema`) instead of the weights"),
    Option(name="trust_pickle", flags=("--trust-pickle",), kind=bool, default=False, group="model",
           help="Load a pickled model file (yolo:best.pt): this runs the code inside it; only for files you trust.",
           doc="load a model file that is a pickle (an Ultralytics checkpoint, `yolo:best.pt`): **loading a pickled model "
               "file runs the code inside it**, so give it only for files you trust. A config (`yolo:yolov8n.yaml`) needs "
               "none, and `--weights` never unpickles code"),
    Option(name="output", flags=("--output",), kind=str, default=None, group="model", metavar="KEY|INDEX",
           help="Where the class scores are in what the forward returns (a key, attribute or index).",
           doc="where the class scores are in what the model's forward returns: a dict key or attribute (`logits`), or a "
               "tuple index (`0`). Without it: `logits`, then `out`, then a pooled embedding (`image_embeds`, `pooler_output`: "
               "a base model without a head), then the first tensor"),
    Option(name="labels", flags=("--labels",), kind=Path, default=None, group="model", metavar="FILE", path=True,
           help="Class names, one per line.", doc="class names, one per line (ImageNet models have theirs built in)"),
    Option(name="model_kwargs", flags=("--model-kwargs",), kind=list, default=None, group="model", field="kwargs",
           metavar="KEY=VALUE", convert=parse_kwarg,
           help="Keyword argument for the model's builder (your factory, timm, torchvision), the value as JSON; repeat for several.",
           doc="a keyword argument for whatever builds the model (your factory, `timm.create_model`, torchvision's "
               "`get_model`), repeatable; the value is read as JSON (`depth=18`, `dims=[64,128]`, `act=\"gelu\"`), else "
               "kept as text (`act=gelu`)"),
    Option(name="input_size", flags=("--input-size",), kind=str, default=None, group="model", metavar="HxW",
           convert=parse_input_shape,
           help="Model input size (224, 160x192 or 3x224x224; a 3-D model's DxHxW); overrides the model's data config.",
           doc="the model's input size, `224`, `160x192` or timm's `3x224x224` (8 to 8,192 pixels a side), or a 3-D model's "
               "`DxHxW` (a volume's depth or a clip's frames: `--clip-len D`); with `--mean`, `--std`, "
               "`--interpolation` and `--crop-pct` (timm's names) it overrides the model's own data config, for any model"),
    Option(name="mean", flags=("--mean",), kind=str, default=None, group="model", metavar="R,G,B", convert=parse_channels("mean"),
           help="Normalisation mean per channel, 0-1 scale (one value for all three).",
           doc="normalisation mean per channel on the 0-1 scale (values above 1.5 are read as 0-255), or one value for all"),
    Option(name="std", flags=("--std",), kind=str, default=None, group="model", metavar="R,G,B", convert=parse_channels("std"),
           help="Normalisation std per channel, 0-1 scale (one value for all three).",
           doc="normalisation standard deviation per channel, as `--mean`"),
    Option(name="interpolation", flags=("--interpolation",), kind=Interpolation, default=None, group="model",
           help="Resampling filter of the resize to the input size.",
           doc="the resampling filter of the resize to the input size: " + ", ".join(f"`{i}`" for i in values(Interpolation))),
    Option(name="crop_pct", flags=("--crop-pct",), kind=float, default=None, group="model", metavar="F", minimum=0.05, maximum=1,
           help="With --crop: the centre crop's share of the resized image (0.875 for ImageNet's 224 of 256).",
           doc="with `--crop`: the centre crop's share of the resized image (ImageNet's 224 of 256 is `0.875`)"),
    Option(name="layers", flags=("--layer", "-l"), kind=list, default=None, group="target", metavar="PATH", aliases=("layer",),
           help="Target layer as a dotted path (negative indices count from the end); repeat to combine. Default: per model family.",
           doc="target layer, repeatable (maps are combined, see `--combine`, then renormalised). Default: per family, see below"),
    Option(name="method", flags=("--method",), kind=Method, default=None, group="target", metavar="NAME",
           help="CAM method (see `gradcam methods`; default gradcam, for detectors hirescam).",
           doc="CAM method, see [Methods](#methods): " + ", ".join(f"`{m}`" for m in values(Method)) + " (default "
               "`gradcam`; for detectors `hirescam`, whose map of one object stays on that object, see "
               "[Detectors](#detectors)). Each method pytorch-grad-cam also has equals its map to 1e-4, on random weights and "
               "on the shipped trained model, signed maps (`--no-relu`) included (`tests/test_methods.py`, `tests/test_parity.py`, "
               "`tests/test_gradient_free.py`, `tests/test_fullgrad_guided.py`; where we differ on purpose the test says why), "
               "except where a first principal component is taken (`eigengradcam`, `--eigen-smooth`) on the ViT: there "
               "each image's tolerance widens with how close the top two singular values are, as far as float32 "
               "rounding can turn the component (at most about 0.04; `tests/test_methods.py` derives it)"),
    Option(name="combine", flags=("--combine",), kind=Combine, default=None, group="maps",
           help="How the maps of several --layer are merged (default mean; detectors: sum).",
           doc="how the maps of several `--layer` are merged: `mean`, `max` or `product` of each layer's normalised map, "
               "or `sum` of their raw maps, normalised once, so each layer counts as much as its evidence (default "
               "`mean`; `sum` for detectors, whose pyramid levels each see objects of one size)"),
    Option(name="relu", flags=("--relu/--no-relu",), kind=bool, default=True, group="maps",
           help="Keep only positive evidence (default), or the signed map.",
           doc="keep only positive evidence (default), or keep the signed map"),
    Option(name="norm", flags=("--norm",), kind=Norm, default=Norm.minmax.value, group="maps",
           help="minmax: each map scaled to [0,1]; none: raw values (see --save-raw).",
           doc="`minmax` (default): each map scaled to [0, 1]; `none`: raw values (the overlay is still scaled for display; "
               "`--save-raw` writes them unscaled)"),
    Option(name="eigen_smooth", flags=("--eigen-smooth",), kind=bool, default=False, group="maps",
           help="First principal component of the weighted activations instead of their sum.",
           doc="reduce the weighted activations by their first principal component instead of summing the channels (less noise)"),
    Option(name="aug_smooth", flags=("--aug-smooth",), kind=bool, default=False, group="maps",
           help="Average the maps of 6 mirrored and zoomed views (6x the cost).",
           doc="average the maps of six views (mirrored, zoomed in and out), each mapped back onto the image; six times the cost"),
    Option(name="cam_batch_size", flags=("--cam-batch-size",), kind=int, default=32, group="maps", metavar="N", minimum=1,
           help="Masked or ablated forwards per pass (scorecam, ablationcam).",
           doc="masked or ablated forwards per pass for `scorecam` and `ablationcam` (default 32); memory does not grow with "
               "the layer's channels"),
    Option(name="save_guided", flags=("--save-guided",), kind=bool, default=False, group="outputs",
           help="With --method guided-gradcam: also write the RGB guided image.",
           doc="with `--method guided-gradcam`: also write the RGB guided Grad-CAM image, `NAME.EXT.guided-gradcam.guided.png`"),
    Option(name="classes", flags=("--class", "-c"), kind=list, default=None, group="target", metavar="N|NAME",
           aliases=("class",), convert=parse_class, help="Class to explain, by index or name; repeat for several. Default: the top class.",
           doc="class to explain, by index or name (any of its synonyms: `tabby cat` names `tabby, tabby cat`, as a class "
               "folder does); repeatable. Default: the top class"),
    Option(name="negative", flags=("--negative",), kind=bool, default=False, group="target",
           help="Explain what pushes the class score down (minus the score): a binary classifier's other class.",
           doc="explain minus the class score: the evidence against the class (a single-logit binary classifier's "
               "negative class; the Grad-CAM paper's counterfactual maps)"),
    Option(name="topk", flags=("--topk", "-k"), kind=int, default=1, group="target", metavar="K", minimum=1,
           help="Explain the top K classes (one map each).", doc="explain the top K classes, one overlay each"),
    Option(name="multilabel", flags=("--multilabel",), kind=bool, default=False, group="target",
           help="Independent labels (sigmoid per logit): one map per label above --threshold.",
           doc="a multi-label model: each logit's sigmoid is its label's probability; one overlay per label above "
               "`--threshold` (none when no label reaches it)"),
    Option(name="threshold", flags=("--threshold",), kind=float, default=None, group="target", metavar="P", minimum=0,
           maximum=1, help="With --multilabel: the probability a label needs (default 0.5).",
           doc="with `--multilabel`: the sigmoid a label needs to be explained (default 0.5)"),
    Option(name="output_index", flags=("--output-index",), kind=int, default=None, group="target", metavar="N", minimum=0,
           help="Explain value N of a regression output (its raw value, no probability).",
           doc="a regression model: explain output value N, the score as it is (no softmax, no probability)"),
    Option(name="task", flags=("--task",), kind=Task, default=None, group="target",
           help="What the model does: classify, detect, segment, prompt or reference (default: found from the model and options).",
           doc="what the model does, `classify`, `detect`, `segment`, `prompt` or `reference`; found from the model (a "
               "torchvision detector returns boxes, a segmenter a score map per class, (N, C, H, W)) and `--prompt` or "
               "`--reference`, so this only checks: a model that does another is one line"),
    Option(name="score_threshold", flags=("--score-threshold",), kind=float, default=None, group="target", metavar="S",
           minimum=0, maximum=1, help="Detectors: explain the detections scoring at least S (default 0.5).",
           doc="a detector: explain each detection whose score is at least `S` (default 0.5)"),
    Option(name="max_detections", flags=("--max-detections",), kind=int, default=None, group="target", metavar="N", minimum=1,
           help="Detectors: at most N detections per image, highest scores first (default 20).",
           doc="a detector: at most `N` detections explained per image, the highest scores first (default 20)"),
    Option(name="min_area", flags=("--min-area",), kind=float, default=None, group="target", metavar="F", minimum=0, maximum=1,
           help="Segmenters: explain each class covering at least this share of the image (default 0.005).",
           doc="a segmenter: explain every class whose predicted region covers at least this share of the image (of `--region` "
               "or `--mask` when given), and each missed region of at least this share (default 0.005, half a percent)"),
    Option(name="region", flags=("--region",), kind=str, default=None, group="target", metavar="WHERE", convert=parse_region,
           help="Segmenters: sum each class's score over predicted (default), truth, or a box x1,y1,x2,y2 in the photo's pixels.",
           doc="a segmenter: the region each class's score is summed over: `predicted` (default: where the model says the class), "
               "`truth` (the class's true mask, with `--truth`), or a box `x1,y1,x2,y2` in the photo's pixels, which explains "
               "the classes predicted in it"),
    Option(name="mask", flags=("--mask",), kind=Path, default=None, group="target", metavar="FILE", path=True,
           help="Segmenters: sum each class's score over this mask (a PNG of the image's size; nonzero pixels are the region).",
           doc="a segmenter: a PNG of the image's size whose nonzero pixels are the region each class's score is summed over "
               "(the same file for every input; an image of another size is its error, one line)"),
    Option(name="prompts", flags=("--prompt",), kind=list, default=None, group="target", metavar="TEXT", aliases=("prompt",),
           help="CLIP-style models: explain the image's similarity to this text; repeat for several (one map each).",
           doc="a CLIP-style model (`open_clip:NAME`, `hf:` CLIP or SigLIP): explain the image's similarity to this text, as "
               "the model scores the pair (cosine times its logit scale; SigLIP's logit with its bias); repeatable, one map each"),
    Option(name="prompt_file", flags=("--prompt-file",), kind=Path, default=None, group="target", metavar="FILE", path=True,
           help="CLIP-style models: prompts, one per line (blank lines and # comments left out).",
           doc="a CLIP-style model: prompts, one per line (blank lines and lines starting with `#` left out), after any `--prompt`"),
    Option(name="template", flags=("--template",), kind=str, default=None, group="target", metavar="TEXT",
           help="With --labels on a CLIP-style model: how a label becomes its prompt (default 'a photo of a {}.').",
           doc="with `--labels` on a CLIP-style model (zero-shot classification): how each label becomes its prompt, `{}` "
               "standing for the label (default `a photo of a {}.`)"),
    Option(name="references", flags=("--reference",), kind=list, default=None, group="target", metavar="IMG", path=True,
           aliases=("reference",),
           help="Embedding models: explain the image's cosine similarity to this image's embedding; repeat to average several.",
           doc="an embedding model (a timm model with `--model-kwargs num_classes=0`, an `hf:` model returning a pooled "
               "embedding, a CLIP image tower, your model returning (N, D)): explain the cosine similarity of the image's "
               "embedding to this image's; several are averaged into one (a concept from examples)"),
    Option(name="crop", flags=("--crop/--whole",), kind=bool, default=False, group="inputs",
           help="Use the model's centre crop (the map covers only that part), or the whole image (default).",
           doc="`--whole` (default): the whole image is resized to the model's input size, so the map covers every pixel. "
               "`--crop`: the model's own eval transform (resize + centre crop, as in training); the map covers the crop and "
               "is zero outside it"),
    Option(name="colormap", flags=("--colormap",), kind=Colormap, default=Colormap.jet.value, group="outputs",
           help="Heat-map colours.", doc=", ".join(f"`{c}`" for c in values(Colormap)) + " (default `jet`)"),
    Option(name="alpha", flags=("--alpha",), kind=float, default=0.5, group="outputs", metavar="A", minimum=0, maximum=1,
           help="Heat-map opacity over the photo, 0 to 1.", doc="heat-map opacity over the photo, 0–1 (default 0.5)"),
    Option(name="style", flags=("--style",), kind=Style, default=Style.overlay.value, group="outputs",
           help="overlay: the map over the photo; side-by-side: the photo and the map; contour: iso-lines over the photo.",
           doc="`overlay` (default): the heat map blended over the photo (`--alpha`); `side-by-side`: the untouched photo "
               "and the heat map beside it; `contour`: iso-lines of the map at 0.2, 0.4, 0.6 and 0.8 over the untouched "
               "photo, for busy or similar-coloured images where an overlay hides the shape"),
    Option(name="caption", flags=("--caption",), kind=bool, default=False, group="outputs",
           help="Write the class, probability, method and layer under the picture, with the colour scale.",
           doc="write the class name, probability, method and layer on a band under the picture, with the colour scale "
               "of the map (the `--colormap` from `low 0` to `1 high`; with `--norm none` the map's raw minimum and "
               "maximum), sized from the picture (Pillow's scalable default font, nothing to install)"),
    Option(name="each", flags=("--each",), kind=bool, default=False, group="outputs",
           help="Detectors and segmenters: also one overlay per detection or region (NAME.EXT.METHOD.detN.png, .segN.png).",
           doc="a detector: besides the picture of every kept box, one overlay per detection, `NAME.EXT.METHOD.detN.png`, "
               "its whole map with only its box drawn; a segmenter: one per explained region, `.segN.png` (`.missN.png` for a "
               "missed region), its whole map with only its region outlined"),
    Option(name="save_raw", flags=("--save-raw",), kind=bool, default=False, group="outputs",
           help="Also write the float32 map at the image's size as .npy (in [0,1] unless --norm none).",
           doc="also write the float32 map at the image's resolution as `.npy` (in [0, 1] unless `--norm none`)"),
    Option(name="output_dir", flags=("--output-dir", "-o"), kind=Path, default="gradcam_out", group="outputs", metavar="DIR",
           path=True, help="Where overlays go; input sub-folders are mirrored.",
           doc="where outputs go (default `gradcam_out/`)"),
    Option(name="recursive", flags=("--recursive", "-r"), kind=bool, default=False, group="inputs",
           help="Scan folders recursively.", doc="scan folders recursively"),
    Option(name="batch_size", flags=("--batch-size", "-b"), kind=int, default=8, group="run", metavar="N", minimum=1,
           help="Images per forward pass.", doc="images per forward pass (default 8)"),
    Option(name="device", flags=("--device",), kind=str, default="auto", group="run", metavar="DEVICE",
           help="auto, cpu, cuda, cuda:N or mps.",
           doc="`auto` (CUDA, then MPS, then CPU; under torchrun or SLURM `cuda:LOCAL_RANK`), `cpu`, `cuda`, `cuda:N`, `mps`"),
    Option(name="shard", flags=("--shard",), kind=str, default=None, group="run", metavar="I/N", convert=parse_shard,
           help="Explain only share I of N (0-based) of the inputs; default: from torchrun or SLURM.",
           doc="explain only share I of N (0-based) of the inputs, the same share whatever order a folder lists in, so N "
               "processes do every input once; under `torchrun` (`RANK`/`WORLD_SIZE`) or SLURM (`SLURM_PROCID`/"
               "`SLURM_NTASKS`) it comes from the environment. Each share keeps its own `records.shard-I-of-N.jsonl`"),
    Option(name="ray", flags=("--ray",), kind=str, default=None, group="run", metavar="ADDRESS",
           help="Run on Ray Data: local (a new cluster here), auto (the cluster of this node) or the head's HOST:PORT. "
                "Needs gradcam-cli[ray].",
           doc="run the images on a Ray Data pipeline, an actor per GPU (or CPU) each holding the model: `local` starts a "
               "cluster on this machine, `auto` joins the one this node belongs to, or the head's address (`head:6379`); "
               "run it on a node of the cluster (`ray job submit`): Ray Data does not run through Ray Client (`ray://`). "
               "The output folder must be storage every node mounts at the same path. Needs `pip install 'gradcam-cli[ray]'`"),
    Option(name="precision", flags=("--precision",), kind=Precision, default=Precision.auto.value, group="run",
           help="auto (bf16 on CUDA, fp32 elsewhere), fp32, bf16 or fp16 for the model's passes; CAM maths stay fp32.",
           doc="`auto` (bf16 autocast on CUDA, fp32 elsewhere), `fp32`, `bf16`, `fp16`: the dtype of the model's passes; "
               "the CAM maths always run in fp32"),
    Option(name="skip_existing", flags=("--skip-existing",), kind=bool, default=False, group="outputs",
           help="Skip images whose outputs are all there already (resume an interrupted run).",
           doc="skip images whose outputs are all there already, e.g. to finish an interrupted run (they get a record with "
               '`"skipped": true`)'),
    Option(name="replace", flags=("--replace",), kind=bool, default=False, group="outputs",
           help="Write over outputs that another run (other model, weights, method, layers, target or style) made in the output folder.",
           doc="write over outputs that another run made under the same names (another model, weights, method, layers, target, "
               "map or picture settings, as each picture's stamp or the folder's records say); without it such a run stops "
               "with one line before replacing one"),
    Option(name="truth", flags=("--truth",), kind=Path, default=None, group="inputs", metavar="FILE", path=True,
           help="Ground truth: `path,class` rows (classifiers); COCO JSON, a folder of YOLO labels or `path,class,x1,y1,x2,y2` "
                "rows (detectors); a folder of mask PNGs (segmenters). Without it, an image's folder named after a class "
                "(val/<class>/x.jpg) is its truth.",
           doc="ground truth. A classifier's: a CSV file of `path,class` rows (class by name or index; relative paths from "
               "the file's folder or the current one; a bare file name matches when unique); without it, an image in a "
               "folder named after one of the model's classes (`val/<class name>/img.jpg`, the ImageFolder layout; ImageNet's "
               "`n01440764` ids too) has that class as its truth, and records carry `true_class`, `true_index` and "
               "`correct`. A detector's: COCO JSON (`instances_*.json`), a folder of YOLO `.txt` labels, or a CSV of "
               "`path,class,x1,y1,x2,y2` rows; each detection is then `tp` or `fp` and each missed object is explained "
               "(see [Detectors](#detectors)). A segmenter's: a folder of mask PNGs, one per image (a class index per pixel, "
               "255 ignored) or one folder per class of binary masks; records then carry each class's IoU and Dice, and each "
               "missed region is explained (see [Segmentation](#segmentation))"),
    Option(name="iou", flags=("--iou",), kind=float, default=0.5, group="inputs", metavar="T", minimum=0, maximum=1,
           help="Detectors with --truth: the IoU a detection needs with a true box of its class to match it (default 0.5).",
           doc="a detector with `--truth`: the IoU a detection needs with a true box of its class to be a true positive "
               "(default 0.5; matched greedily by score, as COCO's evaluation does)"),
    Option(name="report", flags=("--report",), kind=bool, default=False, group="outputs",
           help="At the end (also after Ctrl-C), build the HTML report of the output folder (as `gradcam report DIR`).",
           doc="at the end of the run, also when it is interrupted, build `DIR/report/index.html` from the output folder's "
               "records, as `gradcam report DIR` does"),
    Option(name="tensorboard", flags=("--tensorboard",), kind=Path, default=None, group="outputs", metavar="DIR", path=True,
           help="Also log the overlays and a records table (eval: its metrics and charts) as TensorBoard events in DIR.",
           doc="also log each overlay (`add_image`, tagged with its path in the output folder), a table of the records "
               "(text) and, for `gradcam eval`, each map set's metric means (scalars), its table and charts, as TensorBoard "
               "event files in DIR, beside the files written as always. Needs `pip install 'gradcam-cli[tensorboard]'`"),
    Option(name="wandb", flags=("--wandb",), kind=str, default=None, group="outputs", metavar="PROJECT",
           help="Also log the overlays, a records table (eval: its metrics, table and charts) to a W&B run in PROJECT.",
           doc="also log each overlay (a `wandb.Image` captioned with its class and probability), the records as a "
               "`wandb.Table` and, for `gradcam eval`, its metric means, table and charts, to a Weights & Biases run in "
               "PROJECT (`WANDB_MODE=offline` keeps it in `./wandb` without a network; `wandb sync` sends it later). "
               "Needs `pip install 'gradcam-cli[wandb]'`"),
    Option(name="max_pixels", flags=("--max-pixels",), kind=int, default=DEFAULT_MAX_PIXELS, group="inputs", metavar="N",
           minimum=0, minimum_meaning=" (0 turns the decompression-bomb guard off)",
           help="Refuse images with more pixels than this (decompression bombs); 0 = no limit.",
           doc="refuse images larger than N pixels, read from the header before decoding (default 100,000,000; 0 = no limit): "
               "a guard against decompression bombs"),
    Option(name="every", flags=("--every",), kind=int, default=1, group="inputs", metavar="N", minimum=1,
           help="Videos: explain every Nth frame (default 1: all; the overlay video plays at the input's rate / N)."),
    Option(name="fps", flags=("--fps",), kind=float, default=None, group="inputs", metavar="F", minimum=0.001,
           help="Videos: explain F frames a second (the first frame at or after each 1/F s); excludes --every."),
    Option(name="clip_len", flags=("--clip-len",), kind=int, default=None, group="model", metavar="T", minimum=1,
           help="Video classifiers: frames per clip (default: the model's own; your own 3-D model: required).",
           doc="a video classifier's frames per clip (its input N×3×T×H×W): torchvision's video models know theirs (16); "
               "a model your code builds takes clips when this is given"),
    Option(name="clip_stride", flags=("--clip-stride",), kind=int, default=None, group="inputs", metavar="S", minimum=1,
           help="Video classifiers: a clip starts every S frames (default: its length); a frame's map is the nearest clip's."),
    Option(name="slices", flags=("--slices",), kind=Plane, default=None, group="inputs",
           help="Volumes (NIfTI, DICOM series): explain every slice of this plane with a 2-D model.",
           doc="a volume (`.nii`, `.nii.gz`, a folder of one DICOM series) explained slice by slice with a 2-D model, "
               "`axial`, `coronal` or `sagittal` slices, each upright as a viewer shows it; the maps stacked back into "
               "a NIfTI with the scan's affine"),
    Option(name="window", flags=("--window",), kind=str, default=None, group="inputs", metavar="C,W", convert=parse_window,
           help="Volumes: the intensity window, centre and width (CT: 40,400 soft tissue); default: 0.5-99.5 percentiles.",
           doc="a volume's intensities for the model and the montage: the window's centre and width (CT Hounsfield units: "
               "`40,400` soft tissue, `-600,1500` lung, `400,1800` bone); default the 0.5 and 99.5 percentiles; the records "
               "say which (`intensity`)"),
    Option(name="smooth", flags=("--smooth",), kind=int, default=1, group="outputs", metavar="K", minimum=1,
           help="Videos: each frame's map the mean of the K maps centred on it (no flicker); said in caption and record.",
           doc="a video's maps averaged over K neighbouring frames, centred (default 1: none), so a map does not flicker "
               "between near-equal frames; the records' `settings.smooth` and the caption say it. A classifier's maps "
               "only (a detector's follow their objects)"),
    Option(name="workers", flags=("--workers",), kind=int, default=0, group="run", metavar="N", minimum=0,
           minimum_meaning=" (0 = automatic)", help="Threads decoding and writing images beside the model; 0 = automatic.",
           doc="threads that decode images ahead of the model and write overlays behind it (default 0 = automatic: up to 4 "
               "on CPU, where the model needs the cores too, up to 16 with a GPU; never more than the cores)"),
    Option(name="grid", flags=("--grid",), kind=str, default=None, group="target", metavar="HxW", convert=parse_grid,
           help="Token grid HxW when a layer's layout cannot be inferred.",
           doc="the token grid, when a layer's layout cannot be inferred"),
    Option(name="json_lines", flags=("--json/--no-json",), kind=bool, default=None,
           help="JSON Lines records on stdout (default when stdout is not a terminal).",
           doc="JSON Lines on stdout; the default when stdout is not a terminal"),
    Option(name="config", flags=("--config",), kind=Path, default=None, metavar="FILE",
           help="YAML run preset; command-line flags win.",
           doc="a YAML run preset (see `configs/`); flags on the command line win"),
    Option(name="quiet", flags=("--quiet", "-q"), kind=bool, default=False,
           help="No progress or summary on stderr.", doc="no progress or summary on stderr"),
)
# fmt: on
BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
