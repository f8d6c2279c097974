// ckpt_io_bench: times dtrain's checkpoint I/O paths on one store (file:// or s3://), for the bench scripts
// that set them side by side with dd/cat/curl (bench/ckpt_s3_bench.sh, bench/ckpt_local_bench.sh).
//
//   ckpt_io_bench put  URL KEY FILE     Storage::Put of FILE's bytes (read into memory first, not timed)
//   ckpt_io_bench get  URL KEY FILE     Storage::GetInto of KEY into memory, then compared with FILE (not timed)
//   ckpt_io_bench save URL STEP FILE N  CheckpointManager::Save of FILE's bytes as N files (the optimizer
//                                       state's shape: params + moments), CRC32C and manifest included
//   ckpt_io_bench load URL STEP         CheckpointManager::Load: every file read and its CRC32C checked
// Env: DT_BENCH_PART_MB (S3 part/range size, default 16), DT_BENCH_PARALLEL (S3 connections per file,
// default 8), DT_BENCH_UNSIGNED=1 (S3 bodies as UNSIGNED-PAYLOAD, as curl sends them). Prints one line: "<mode> <bytes>
// bytes <seconds> s <MB/s> MB/s". Exit 1 on any error.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "storage/storage.h"

namespace {

using dtrain::Status;

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  out->resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  return static_cast<bool>(in.read(out->data(), static_cast<std::streamsize>(out->size())));
}

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "ckpt_io_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

int64_t EnvInt(const char* name, int64_t dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : dflt;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int want = mode == "put" || mode == "get" ? 5 : mode == "save" ? 6 : mode == "load" ? 4 : -1;
  if (want < 0 || argc != want) {
    std::fprintf(stderr, "usage: ckpt_io_bench put|get URL KEY FILE | save URL STEP FILE NFILES | load URL STEP\n");
    return 2;
  }
  dtrain::storage::StorageOptions opts;
  opts.part_size = static_cast<uint64_t>(EnvInt("DT_BENCH_PART_MB", 16)) << 20;
  opts.multipart_threshold = opts.part_size;
  opts.parallel_parts = static_cast<int>(EnvInt("DT_BENCH_PARALLEL", 8));
  opts.unsigned_payload = EnvInt("DT_BENCH_UNSIGNED", 0) != 0;
  std::unique_ptr<dtrain::storage::Storage> store;
  Status st = dtrain::storage::Storage::Open(argv[2], opts, &store);
  if (!st.ok()) return Fail("open", st);
  dtrain::runtime::CheckpointManager mgr(std::move(store), dtrain::runtime::CheckpointOptions());
  mgr.set_run_id("bench");

  std::string data;
  // get: only the file's size now (one copy of the bytes in memory, not two), its bytes after the timing.
  if (mode == "get") {
    std::ifstream in(argv[4], std::ios::binary | std::ios::ate);
    if (in) data.resize(static_cast<size_t>(in.tellg()));
  }
  if (mode != "load" && mode != "get" && !ReadFile(argv[4], &data)) {
    std::fprintf(stderr, "ckpt_io_bench: cannot read %s\n", argv[4]);
    return 1;
  }
  std::string got;
  uint64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (mode == "put") {
    st = mgr.store().Put(argv[3], data.data(), data.size());
    bytes = data.size();
  } else if (mode == "get") {
    got.swap(data);  // the file's size, already allocated and touched
    uint64_t size = 0;
    st = mgr.store().GetInto(argv[3], got.data(), got.size(), &size);
    if (st.ok() && size != got.size()) st = Status::DataLoss("object size " + std::to_string(size));
    bytes = got.size();
  } else if (mode == "save") {
    const int64_t n = std::max<int64_t>(1, std::atoll(argv[5]));
    const size_t each = (data.size() / n) & ~size_t{3};
    std::vector<dtrain::runtime::CheckpointBlob> blobs;
    for (int64_t i = 0; i < n; ++i) {
      const size_t size = i + 1 == n ? data.size() - each * i : each;
      blobs.push_back(
          {"state" + std::to_string(i) + ".bin", data.data() + each * i, size, static_cast<int64_t>(size / 4)});
    }
    dtrain::proto::CheckpointManifest m;
    m.set_step(std::atoll(argv[3]));
    st = mgr.Save(m, blobs);
    bytes = data.size();
  } else {
    dtrain::runtime::LoadedCheckpoint loaded;
    st = mgr.Load(std::atoll(argv[3]), &loaded);
    for (const auto& [name, b] : loaded.files) bytes += b.size();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return Fail(mode, st);
  if (mode == "get") {  // compared with the file in chunks
    std::ifstream in(argv[4], std::ios::binary);
    std::string chunk(64u << 20, '\0');
    for (size_t at = 0; at < got.size(); at += chunk.size()) {
      const size_t n = std::min(chunk.size(), got.size() - at);
      if (!in.read(chunk.data(), static_cast<std::streamsize>(n)) || got.compare(at, n, chunk, 0, n) != 0) {
        return Fail("get", Status::DataLoss("the bytes differ from the file at offset " + std::to_string(at)));
      }
    }
  }
  std::printf("%s %llu bytes %.3f s %.1f MB/s\n", mode.c_str(), static_cast<unsigned long long>(bytes), s,
              bytes / 1e6 / s);
  return 0;
}
