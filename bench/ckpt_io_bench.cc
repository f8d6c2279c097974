// ckpt_io_bench: times dtrain's checkpoint I/O paths on one store (file:// or s3://), for the bench scripts
// that set them side by side with dd/cat/curl (bench/ckpt_s3_bench.sh, bench/ckpt_local_bench.sh).
//
//   ckpt_io_bench put  URL KEY FILE     Storage::Put of FILE's bytes (read into memory first, not timed)
//   ckpt_io_bench get  URL KEY FILE     Storage::GetInto of KEY into memory, then compared with FILE (not timed)
//   ckpt_io_bench save URL STEP FILE N  CheckpointManager::Save of FILE's bytes as N files (the optimizer
//                                       state's shape: params + moments), CRC32C and manifest included
//   ckpt_io_bench load URL STEP         CheckpointManager::Load into a LoadSink of 4 KiB-aligned buffers that are
//                                       not zero-filled (the restore path: runtime/train/restore_sink.h), every
//                                       file read in chunks and its CRC32C checked; buffers allocated in the timing
//   ckpt_io_bench load-reuse URL STEP   as load, timing a second load into the buffers of a first (untimed) one: the
//                                       trainer's case on a GPU, whose pinned buffers are allocated beforehand
//   ckpt_io_bench load-strings URL STEP CheckpointManager::Load into LoadedCheckpoint::files (std::string: zero-
//                                       filled first; the path of the tools: `dtrain ckpt verify/export`)
// Env: DT_BENCH_PART_MB (S3 part/range size, and the restore chunk size, default 16), DT_BENCH_PARALLEL (S3
// connections per file, and the restore threads on S3, default 8), DT_BENCH_THREADS (restore threads; default 4 on
// a local disk), DT_BENCH_UNSIGNED=1 (S3 bodies as UNSIGNED-PAYLOAD, as curl sends them). Prints one line: "<mode>
// <bytes> bytes <seconds> s <MB/s> MB/s". Exit 1 on any error.

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

// The restore path's sink: one 4 KiB-aligned buffer per file, as pinned host memory would be, never zero-filled.
class AlignedSink : public dtrain::runtime::LoadSink {
 public:
  ~AlignedSink() override {
    for (char* p : buffers_) std::free(p);
  }
  Status Buffer(size_t index, const dtrain::proto::CheckpointFile& f, char** out) override {
    if (index < buffers_.size() && sizes_[index] >= f.size()) {  // a second load (load-reuse): the same buffer
      *out = buffers_[index];
      return Status::OK();
    }
    *out = static_cast<char*>(std::aligned_alloc(4096, (f.size() + 4095) / 4096 * 4096 + 4096));
    if (*out == nullptr) return Status::Unavailable("out of memory");
    buffers_.push_back(*out);
    sizes_.push_back(f.size());
    return Status::OK();
  }

 private:
  std::vector<char*> buffers_;
  std::vector<uint64_t> sizes_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool load = mode == "load" || mode == "load-reuse" || mode == "load-strings";
  const int want = mode == "put" || mode == "get" ? 5 : mode == "save" ? 6 : load ? 4 : -1;
  if (want < 0 || argc != want) {
    std::fprintf(stderr,
                 "usage: ckpt_io_bench put|get URL KEY FILE | save URL STEP FILE NFILES | load|load-reuse|load-strings "
                 "URL STEP\n");
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
  dtrain::runtime::CheckpointOptions ckpt_opts;
  const bool s3 = std::string(argv[2]).rfind("s3://", 0) == 0;
  ckpt_opts.restore_chunk_bytes = opts.part_size;
  ckpt_opts.restore_threads = static_cast<int>(EnvInt("DT_BENCH_THREADS", s3 ? opts.parallel_parts : 4));
  dtrain::runtime::CheckpointManager mgr(std::move(store), ckpt_opts);
  mgr.set_run_id("bench");

  std::string data;
  // get: only the file's size now (one copy of the bytes in memory, not two), its bytes after the timing.
  if (mode == "get") {
    std::ifstream in(argv[4], std::ios::binary | std::ios::ate);
    if (in) data.resize(static_cast<size_t>(in.tellg()));
  }
  if (!load && mode != "get" && !ReadFile(argv[4], &data)) {
    std::fprintf(stderr, "ckpt_io_bench: cannot read %s\n", argv[4]);
    return 1;
  }
  std::string got;
  uint64_t bytes = 0;
  AlignedSink sink;
  if (mode == "load-reuse") {  // the buffers allocated and their pages touched, untimed
    dtrain::runtime::LoadedCheckpoint first;
    st = mgr.Load(std::atoll(argv[3]), &first, &sink);
    if (!st.ok()) return Fail(mode, st);
  }
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
    st = mgr.Load(std::atoll(argv[3]), &loaded, mode == "load-strings" ? nullptr : &sink);
    for (const auto& f : loaded.manifest.files()) bytes += f.size();
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
