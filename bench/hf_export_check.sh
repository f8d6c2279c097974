#!/usr/bin/env bash
# Checks `dtrain ckpt export --format hf` against Hugging Face transformers: trains a small GPT-2 with dtrain on
# byte tokens of real text, exports it, loads the export with transformers.GPT2LMHeadModel.from_pretrained and
# prints the largest |logit difference| against dtrain's own forward (bench/model_logits) on the same tokens.
# Needs python3 with torch and transformers. Usage: bench/hf_export_check.sh [BUILD_DIR] [OUT_DIR]
#   DTRAIN_ARGS: extra --set overrides for the training run (e.g. --set train.device=cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-$(mktemp -d /tmp/dtrain_hf_XXXXXX)}
mkdir -p "$OUT"
CFG=configs/gpt2_tiny.yaml
SETS=(--set model.gpt2.vocab_size=256 --set model.gpt2.padded_vocab_size=256 --set model.gpt2.max_seq_len=64
      --set data.dataset=shards --set data.train_shards="$OUT/tokens" --set train.max_steps=60
      --set run.dir="$OUT/run" ${DTRAIN_ARGS:-})
cat /usr/share/common-licenses/* > "$OUT/input.txt"
"$BUILD/dtrain" data convert-text --out "$OUT/tokens" --seq-len 64 "$OUT/input.txt"
"$BUILD/dtrain" train "$CFG" "${SETS[@]}" 2>&1 | tail -3
"$BUILD/dtrain" ckpt export "$OUT/run/checkpoints" --out "$OUT/weights.safetensors"
"$BUILD/dtrain" ckpt export "$OUT/run/checkpoints" --format hf --out "$OUT/hf"
python3 - "$OUT" <<'PY'
import struct, sys
out = sys.argv[1]
text = open(f"{out}/input.txt", "rb").read()
B, T = 4, 64  # byte tokens of the text, as int32
open(f"{out}/tokens.bin", "wb").write(struct.pack(f"<{B * T}i", *text[1000:1000 + B * T]))
PY
"$BUILD/bench/model_logits" "$CFG" "$OUT/weights.safetensors" "$OUT/tokens.bin" "$OUT/dtrain_logits.bin" \
  "${SETS[@]}" --set data.batch_size=4
python3 - "$OUT" <<'PY'
import sys, numpy as np, torch, transformers
out = sys.argv[1]
B, T, V = 4, 64, 256
tokens = torch.from_numpy(np.fromfile(f"{out}/tokens.bin", dtype=np.int32).reshape(B, T)).long()
model = transformers.GPT2LMHeadModel.from_pretrained(f"{out}/hf").eval()
with torch.no_grad():
    hf = model(tokens).logits.reshape(B * T, V).numpy()
dt = np.fromfile(f"{out}/dtrain_logits.bin", dtype=np.float32).reshape(B * T, V)
diff = np.abs(hf - dt).max()
print(f"transformers {transformers.__version__}, torch {torch.__version__}: logits [{B * T}, {V}], "
      f"|logit| max {np.abs(dt).max():.4f}, max abs difference {diff:.3e}, argmax agreement "
      f"{(hf.argmax(1) == dt.argmax(1)).mean() * 100:.2f}%")
sys.exit(0 if diff < 1e-3 else 1)
PY
