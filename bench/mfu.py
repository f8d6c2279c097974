"""Model FLOPs utilization of GPT-2 on one H200, in llm.c's convention: 6 N + 6 L C T FLOPs per token (N: every
parameter, the padded 50304-row embedding included, as llm.c counts them), with two denominators side by side:
the H200's dense bf16 spec (989 TFLOP/s) and what a large cuBLAS bf16 GEMM actually reaches on it (~790 TFLOP/s).

usage: python3 bench/mfu.py MODEL TOKENS_PER_S_PER_GPU [SEQ]      (MODEL: 124m or 350m)
"""
import sys

H200_SPEC = 989e12
H200_GEMM = 790e12
VOCAB, SEQ = 50304, 1024
MODELS = {"124m": (12, 12, 768), "350m": (24, 16, 1024), "774m": (36, 20, 1280), "1.5b": (48, 25, 1600)}  # layers, heads, width


def params(model, seq=SEQ):
    L, _, C = MODELS[model]
    per_layer = 12 * C * C + 13 * C  # attention (4 C^2 + 4 C) + MLP (8 C^2 + 5 C) + 2 layer norms (4 C)
    return VOCAB * C + seq * C + L * per_layer + 2 * C


def flops_per_token(model, seq=SEQ):
    L, _, C = MODELS[model]
    return 6 * params(model, seq) + 6 * L * C * seq


def mfu(model, tokens_per_s_per_gpu, seq=SEQ):
    f = tokens_per_s_per_gpu * flops_per_token(model, seq)
    return f / H200_SPEC, f / H200_GEMM


if __name__ == "__main__":
    model, tps = sys.argv[1], float(sys.argv[2])
    seq = int(sys.argv[3]) if len(sys.argv) > 3 else SEQ
    spec, gemm = mfu(model, tps, seq)
    print(f"{model}: {params(model, seq) / 1e6:.1f}M params, {flops_per_token(model, seq) / 1e9:.3f} GFLOP/token; "
          f"{tps:.0f} tokens/s = MFU {100 * spec:.1f}% of 989 TFLOP/s (spec), {100 * gemm:.1f}% of 790 TFLOP/s (cuBLAS)")
