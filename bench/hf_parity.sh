#!/usr/bin/env bash
# Hugging Face parity of dtrain's import (model.init_from: hf:DIR) and export (ckpt export --format hf), issue 34:
# transformers' randomly initialised GPT2LMHeadModel (124M) and LlamaForCausalLM at SmolLM2-360M's shape, saved
# with save_pretrained; dtrain's fp32 logits of the imported weights against transformers' (max relative error
# <= 1e-4), then import -> export byte-identical and the export loaded back in transformers with the same logits.
# One table (bench/hf_parity.py says how each figure is made). Needs a GPU (else DEVICE=cpu, slow) and python3
# with torch, transformers, safetensors and numpy; ~10 GB under OUT_DIR.
# Usage: bench/hf_parity.sh [BUILD_DIR] [OUT_DIR]
#   MODELS=gpt2,llama (the default; one of them alone works), DEVICE=cuda|cpu (default: cuda when torch sees one)
# bench/hf_export_check.sh is the smaller check of a trained GPT-2's export against transformers.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-$(mktemp -d /tmp/dtrain_hf_parity_XXXXXX)}
mkdir -p "$OUT"
for bin in dtrain bench/model_logits; do
  [[ -x $BUILD/$bin ]] || { echo "hf_parity: no $BUILD/$bin (build the targets dtrain and model_logits)" >&2; exit 2; }
done
python3 -c "import torch, transformers, safetensors, numpy" ||
  { echo "hf_parity: needs python3 with torch, transformers, safetensors and numpy" >&2; exit 2; }
exec python3 bench/hf_parity.py --build "$BUILD" --out "$OUT" --models "${MODELS:-gpt2,llama}" ${DEVICE:+--device "$DEVICE"}
