"""The last step of bench/first_hour.sh: transformers loads dtrain's Hugging Face export and scores the validation
records (mean next-token loss over the first 64 records, the same tokens dtrain evaluated on), then, when the
tokenizer loads (LlamaTokenizer needs the Python sentencepiece package), encodes a line of the text and generates a
continuation. Usage: first_hour_check.py HF_DIR VAL_DATASET_DIR TEXT"""
import glob, struct, sys

import numpy as np
import torch
import transformers

hf_dir, val_dir, text_path = sys.argv[1:4]
model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).cuda().eval()
print(f"transformers {transformers.__version__}: {type(model).__name__}, "
      f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, vocab {model.config.vocab_size}")

# Records of the first shard (docs/data_format.md): header, offset table, uint16 tokens (vocab < 65536).
raw = open(sorted(glob.glob(f"{val_dir}/*.dts"))[0], "rb").read()
n = struct.unpack_from("<Q", raw, 16)[0]
recs = []
for i in range(min(n, 64)):
    off, length, _ = struct.unpack_from("<QII", raw, 32 + 16 * i)
    recs.append(np.frombuffer(raw, dtype="<u2", count=length // 2, offset=off).astype(np.int64))
x = torch.from_numpy(np.stack(recs)).cuda()
with torch.no_grad():  # a record is seq_len + 1 tokens: inputs [:-1], next-token targets [1:]
    loss = sum(torch.nn.functional.cross_entropy(model(x[i:i + 16, :-1]).logits.flatten(0, 1), x[i:i + 16, 1:].flatten(),
                                                 reduction="sum").item() for i in range(0, len(x), 16))
loss /= x[:, 1:].numel()
print(f"transformers' loss on {len(x)} validation records of {x.shape[1] - 1} tokens: {loss:.4f} (ppl {np.exp(loss):.2f})")

try:
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
except Exception as e:  # noqa: BLE001 - report and go on: the model check above stands on its own
    print(f"tokenizer not loaded: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    sys.exit(0)
line = next(l for l in open(text_path, encoding="utf-8", errors="replace") if len(l.split()) > 8).strip()
ids = tok(line, add_special_tokens=False)["input_ids"]
print(f"tokenizer {type(tok).__name__}: {line[:60]!r} -> {len(ids)} tokens {ids[:12]}")
out = model.generate(torch.tensor([ids[:16]]).cuda(), max_new_tokens=40, do_sample=False)
print("greedy continuation:", repr(tok.decode(out[0][16:])))
