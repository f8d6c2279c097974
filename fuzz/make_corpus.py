#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/: small, valid examples of each input format
(plus a few near misses), so that mutations start deep inside the parsers. Run from anywhere:
    python3 fuzz/make_corpus.py
Binary protobuf seeds go through `protoc --encode` (protobuf-compiler), so they follow proto/*.proto.
The output is deterministic; the files are committed, this script documents where they come from.
"""
import pathlib
import shutil
import struct
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def encode(message, text, proto):
    return subprocess.run(["protoc", f"--encode=dtrain.proto.{message}", "-I", str(ROOT / "proto"), proto],
                          input=text.encode(), capture_output=True, check=True).stdout


def seal(payload):
    """A file as core/sealed_bytes.h writes it: magic, CRC32C of the payload (LE), payload."""
    return b"\0dtSEAL1" + struct.pack("<I", crc32c(payload)) + payload


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def shard(records):
    """A shard file as data/shard_format.h lays it out."""
    n = len(records)
    off = 32 + 16 * n
    table = b""
    for r in records:
        table += struct.pack("<QII", off, len(r), crc32c(r))
        off += len(r)
    head = b"DTSHARD1" + struct.pack("<I", 1)
    rest = struct.pack("<QQ", n, 0) + table
    crc = crc32c(head + rest)
    return head + struct.pack("<I", crc) + rest + b"".join(records)


def safetensors(tensors, metadata=None):
    import json
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, shape, values in tensors:
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)

    # config_fuzzer: the shipped configs, the test fixtures, and overrides ("#set" lines).
    for p in sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "tests/runtime/testdata").glob("*.yaml")):
        put("config_fuzzer", p.name, p.read_bytes())
    put("config_fuzzer", "overrides.yaml",
        "#set optim.lr=0.5\n#set model.mlp.hidden=[64, 32]\n#set data.dir='/tmp/x # y'\nmodel:\n  kind: mlp\n")
    put("config_fuzzer", "quoting.yaml",
        "---\n# comment\ndata:\n  dir: \"/a\\tb\\x41\\\"c\"\n  dataset: 'shards'\nmodel:\n  mlp:\n    hidden:\n"
        "      - 8\n      - 4\n")
    put("config_fuzzer", "crlf_bom.yaml", "\ufeffoptim:\r\n  name: sgd\r\n  lr: 1.0e-2\r\n")

    # hostfile_fuzzer: hostfiles and --hosts lists.
    put("hostfile_fuzzer", "openmpi.hostfile", "# two nodes\nnode-a slots=8   # the first\n  node-b slots=4 max_slots=16\n"
        "node-c\n")
    put("hostfile_fuzzer", "deepspeed.hostfile", "worker-1 slots=8\nworker-2 slots=8\n")
    put("hostfile_fuzzer", "hosts_list", "a:8,b:4,c")
    put("hostfile_fuzzer", "bad_attr.hostfile", "a slots=8\nb cpus=4\n")
    put("hostfile_fuzzer", "number", "1000000")

    # dataset_fuzzer: 'M' + manifest.pb, 'S' + a manifest to seal, (a shard of N records of R bytes has 32 + N * (16 + R) bytes), 'W' + records for the writer round trip, or a shard file.
    image = ('magic: "dtrain.dataset" format_version: 1 schema { kind: IMAGE dims: 28 dims: 28 has_label: true '
             'num_classes: 10 pixel_mean: 0.286 pixel_std: 0.353 } shards { file: "shard-00000.dts" num_samples: 3 '
             'bytes: 2444 crc32c: 12345 } shards { file: "shard-00001.dts" num_samples: 2 bytes: 1640 } '
             'total_samples: 5 source: "fashion-mnist train"')
    tokens = ('magic: "dtrain.dataset" format_version: 1 schema { kind: TOKENS dims: 1024 token_dtype: UINT16 '
              'vocab_size: 50257 } shards { file: "shard-00000.dts" num_samples: 7 bytes: 14480 } '
              'total_samples: 7')
    put("dataset_fuzzer", "image_manifest", b"M" + encode("DatasetManifest", image, "shard.proto"))
    put("dataset_fuzzer", "tokens_manifest", b"M" + encode("DatasetManifest", tokens, "shard.proto"))
    # Sealed manifests as written on disk ('M'), and 'S' + a bare manifest that the fuzzer seals itself.
    put("dataset_fuzzer", "image_manifest_sealed", b"M" + seal(encode("DatasetManifest", image, "shard.proto")))
    put("dataset_fuzzer", "tokens_manifest_to_seal", b"S" + encode("DatasetManifest", tokens, "shard.proto"))
    put("dataset_fuzzer", "shard_image", shard([struct.pack("<I", 3) + bytes(range(16)), struct.pack("<I", 9) + b"\xff" * 16]))
    put("dataset_fuzzer", "shard_tokens", shard([struct.pack("<4H", 1, 2, 3, 50256)] * 3))
    put("dataset_fuzzer", "shard_empty", shard([]))
    put("dataset_fuzzer", "write_records", b"W\x03abc\x00\x05hello\x01z")

    # checkpoint_manifest_fuzzer: manifest.pb of step 7 listing params.bin ("0123456789abcdef") and opt.bin.
    params_crc = crc32c(b"0123456789abcdef")
    ckpt = (f'format_version: 1 step: 7 world_size: 2 files {{ name: "params.bin" size: 16 crc32c: {params_crc} '
            f'dtype: "f32" numel: 4 }} files {{ name: "opt.bin" size: 0 crc32c: 0 dtype: "f32" }} optimizer: "adamw" '
            'optimizer_step: 7 lr_schedule { kind: "cosine" base_lr: 0.001 warmup_steps: 2 total_steps: 100 '
            'next_lr: 0.0009 } data { seed: 42 epoch: 0 samples_in_epoch: 448 samples_consumed: 448 global_batch: 64 '
            'shuffle: true } params { name: "fc1.w" shape: 2 shape: 2 offset: 0 numel: 4 } '
            'config_yaml: "model:\\n  kind: mlp\\n" dtrain_version: "0.1.0" created_unix_ms: 1764500000000')
    put("checkpoint_manifest_fuzzer", "step7", encode("CheckpointManifest", ckpt, "checkpoint.proto"))
    # As written on disk (sealed: core/sealed_bytes.h), and 'S' + a bare manifest that the fuzzer seals itself.
    put("checkpoint_manifest_fuzzer", "step7_sealed", seal(encode("CheckpointManifest", ckpt, "checkpoint.proto")))
    put("checkpoint_manifest_fuzzer", "step7_to_seal", b"S" + encode("CheckpointManifest", ckpt, "checkpoint.proto"))
    put("checkpoint_manifest_fuzzer", "bad_crc",
        encode("CheckpointManifest", 'step: 7 files { name: "params.bin" size: 16 crc32c: 1 }', "checkpoint.proto"))
    put("checkpoint_manifest_fuzzer", "other_step", encode("CheckpointManifest", "step: 8", "checkpoint.proto"))

    # safetensors_fuzzer: 'R' + a file to read; anything else drives the write -> read round trip.
    put("safetensors_fuzzer", "read_two", b"R" + safetensors(
        [("fc1.weight", [2, 3], [0.5, -1, 2, 3.25, 1e-3, -0.0]), ("fc1.bias", [2], [1, 2])], {"format": "pt"}))
    put("safetensors_fuzzer", "read_scalar", b"R" + safetensors([("step", [], [7.0])]))
    put("safetensors_fuzzer", "read_empty", b"R" + safetensors([]))
    put("safetensors_fuzzer", "roundtrip", bytes(range(64)))
    # One name twice: the reader must refuse the file (and the writer never makes one).
    dup = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    dup += b" " * (-len(dup) % 8)
    put("safetensors_fuzzer", "read_duplicate", b"R" + struct.pack("<Q", len(dup)) + dup + bytes(8))

    # s3_xml_fuzzer: answers of ListObjectsV2, ListMultipartUploads, CreateMultipartUpload and errors.
    put("s3_xml_fuzzer", "list_objects",
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>'
        '<Contents><Key>p/a&amp;b</Key><Size>12</Size></Contents><Contents><Key>p/c&#x41;&#66;</Key><Size>0</Size>'
        '</Contents><NextContinuationToken>1/tok==</NextContinuationToken></ListBucketResult>')
    # Keys no listing of s3://b/p may return (each must fail ParseListPage, naming the key): a ".."
    # escape, a reference with a space in it, a control byte, an absurd size, a key outside the prefix.
    put("s3_xml_fuzzer", "list_hostile",
        '<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>p/s/../../x</Key><Size>1</Size></Contents>'
        '<Contents><Key>p/&# 65;</Key><Size>2</Size></Contents><Contents><Key>p/a&#x1;b</Key><Size>1</Size>'
        '</Contents><Contents><Key>p/k</Key><Size>18446744073709551616</Size></Contents><Contents><Key>p/</Key>'
        '<Size>0</Size></Contents><Contents><Key>q/k</Key><Size>1</Size></Contents></ListBucketResult>')
    put("s3_xml_fuzzer", "list_uploads",
        '<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>2~abc</UploadId></Upload>'
        '<Upload><Key>k2</Key><UploadId>2~def</UploadId></Upload></ListMultipartUploadsResult>')
    put("s3_xml_fuzzer", "create_upload",
        '<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>VXBsb2FkSWQ</UploadId>'
        '</InitiateMultipartUploadResult>')
    put("s3_xml_fuzzer", "error",
        '<Error><Code>SlowDown</Code><Message>Please reduce your request rate &lt;now&gt; &#128512;</Message>'
        '<RequestId>tx1</RequestId></Error>')

    control_plane()


def control_plane():
    """Seeds of node_link_fuzzer and rendezvous_fuzzer: an answer, a valid challenge, then frames / hellos."""
    answer = bytes(range(64))
    challenge = b"DTAU" + struct.pack(">I", 1) + bytes(range(100, 132))

    def frame(kind, node, a, b, text=b""):
        return struct.pack(">4sIiii", b"dtNL", kind, node, a, b) + text[:235].ljust(236, b"\0")

    put("node_link_fuzzer", "hello_node1", answer + challenge + frame(1, 1, 4, 1))
    put("node_link_fuzzer", "stray_hello_other_nnodes", answer + challenge + frame(1, 1, 3, 1))
    put("node_link_fuzzer", "stop_and_alive", answer + challenge + frame(5, 2, 137, 0, b"rank 5 on host c failed first")
        + frame(4, 2, 0, 0) + frame(6, 2, 0, 0))
    put("node_link_fuzzer", "bad_challenge", answer + b"DTAU" + struct.pack(">I", 9) + bytes(32) + frame(2, 0, 0, 0))

    def hello(version, rank, world):
        return b"DTRZ" + struct.pack(">IiI", version, rank, world)

    def notice(code, n):
        return b"DTRZ" + struct.pack(">II", code, n)

    put("rendezvous_fuzzer", "hello_rank2", answer + hello(2, 2, 4) + notice(0, 0) + hello(2, 1, 4) + notice(1, 0))
    put("rendezvous_fuzzer", "hello_other_world", answer + hello(2, 3, 8) + notice(2, 40))
    put("rendezvous_fuzzer", "hello_v1_negative_rank", answer + hello(1, -1, 4) + notice(3, 70000))


if __name__ == "__main__":
    main()
