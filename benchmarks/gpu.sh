#!/usr/bin/env bash
# The speed benchmark on a CUDA machine: resnet50 and vit_base_patch16_224, batch sizes 32 to 128,
# fp32 and bf16, against pytorch-grad-cam (one image at a time, as its README does) when it is
# installed; then `gradcam eval`'s deletion and insertion against torchcam's when it is installed
# (bf16 autocast, channels-last, chunks of 128), and two torchrun shards against one process
# (benchmarks/scale.py); prints the tables. About 8 minutes on one H200;
# never part of CI.
#
#   bash benchmarks/gpu.sh            # from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

python - <<'PY'
import importlib.util, sys
import torch
if not torch.cuda.is_available():
    sys.exit("no CUDA device: run benchmarks/speed.py on CPU instead")
missing = [m for m in ("timm", "typer", "cv2", "PIL", "safetensors", "yaml", "rich") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing Python packages: {', '.join(missing)} (pip install -e . installs them)")
if importlib.util.find_spec("pytorch_grad_cam") is None:
    print("pytorch-grad-cam is not installed: our numbers only (pip install grad-cam for the comparison)")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
PY

timeout 290 python benchmarks/speed.py --device cuda --models resnet50,vit_base_patch16_224 \
    --images 256 --rounds 1 --batch-sizes 32,128 --precisions fp32,bf16 "$@"

# two shards on the one GPU (torchrun, cuda:LOCAL_RANK modulo the GPUs) against one process, same folder
timeout 150 python benchmarks/scale.py --device cuda --model resnet50 --images 512 --processes 2 --no-ray

if python -c "import torchcam" 2>/dev/null; then
    timeout 200 python benchmarks/eval.py --device cuda --images 64 --chunk 128 --rounds 2
else
    echo "torchcam is not installed: no deletion/insertion comparison (pip install torchcam)"
fi
