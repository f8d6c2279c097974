// ckpt_io_bench: times dtrain's checkpoint I/O paths on one store (file:// or s3://), for the bench scripts
// that set them side by side with dd/cat/curl (bench/ckpt_s3_bench.sh, bench/ckpt_local_bench.sh).
//
//   ckpt_io_bench put  URL KEY FILE     Storage::Put of FILE's bytes (read into memory first, not timed)
//   ckpt_io_bench get  URL KEY FILE     Storage::GetInto of KEY into memory, then compared with FILE (not timed)
//   ckpt_io_bench save URL STEP FILE N  CheckpointManager::Save of FILE's bytes as N files (the optimizer
//                                       state's shape: params + moments), CRC32C and manifest included
//   ckpt_io_bench load URL STEP         CheckpointManager::Load into the trainer's RestoreSink
//                                       (runtime/train/restore_sink.h), every file read in chunks, its CRC32C checked
//                                       and put into a host tensor of its own, as the CPU trainer reads straight into
//                                       its parameters and optimizer state. Those exist and are written before a
//                                       restore, so here too the tensors are allocated and written BEFORE the timing
//   ckpt_io_bench load-fresh URL STEP   as load, the tensors allocated in the timing and not written before (their
//                                       pages faulted in by the reads): not the trainer's case, for comparison
//   ckpt_io_bench load-device URL STEP  (CUDA builds) as load into device tensors (allocated before the timing, as
//                                       the GPU trainer's state is): each chunk read into a pinned staging buffer of
//                                       the sink and copied on to the GPU; timed until the copies are done
//   ckpt_io_bench load-strings URL STEP CheckpointManager::Load into LoadedCheckpoint::files (std::string: zero-
//                                       filled first; the path of the tools: `dtrain ckpt verify/export`)
// Env: DT_BENCH_PART_MB (S3 part/range size, and the restore chunk size, default 16), DT_BENCH_PARALLEL (S3
// connections per file, and the restore threads on S3, default 8), DT_BENCH_THREADS (restore threads; default 4 on
// a local disk; the sink gets that many + 2 staging buffers), DT_BENCH_UNSIGNED=1 (S3 bodies as UNSIGNED-PAYLOAD, as
// curl sends them). Prints one line: "<mode> <bytes> bytes <seconds> s <MB/s> MB/s". Exit 1 on any error.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/tensor.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/restore_sink.h"
#include "storage/scheme.h"
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

// The state a `load` restores into: one f32 tensor per data file of the step (from a listing), each a StateSlice
// taking the whole file, allocated from `alloc` and, unless `fresh`, written once as a trainer's state is (host
// memory only: device memory has no first-touch faults).
Status MakeState(dtrain::storage::Storage* store, int64_t step, dtrain::Allocator* alloc, bool fresh,
                 std::vector<std::unique_ptr<dtrain::Tensor>>* tensors, std::vector<dtrain::runtime::StateSlice>* out) {
  const std::string dir = dtrain::runtime::CheckpointManager::StepDir(step) + "/";
  std::vector<dtrain::storage::ObjectInfo> objects;
  DT_RETURN_IF_ERROR(store->List(dir, &objects));
  for (const auto& o : objects) {
    const std::string name = o.key.substr(dir.size());
    if (name == "manifest.pb") continue;
    const int64_t numel = static_cast<int64_t>(o.size / 4);
    tensors->push_back(std::make_unique<dtrain::Tensor>());
    DT_RETURN_IF_ERROR(dtrain::Tensor::Empty({numel}, dtrain::DType::kF32, alloc, tensors->back().get()));
    if (!fresh && !tensors->back()->is_cuda()) DT_RETURN_IF_ERROR(tensors->back()->SetZero());
    out->push_back({name, numel, 0, numel, tensors->back().get(), 0});
  }
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool load = mode == "load" || mode == "load-fresh" || mode == "load-device" || mode == "load-strings";
  const int want = mode == "put" || mode == "get" ? 5 : mode == "save" ? 6 : load ? 4 : -1;
  if (want < 0 || argc != want) {
    std::fprintf(stderr,
                 "usage: ckpt_io_bench put|get URL KEY FILE | save URL STEP FILE NFILES | "
                 "load|load-fresh|load-device|load-strings URL STEP\n");
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
  const dtrain::storage::Scheme* scheme = nullptr;
  st = dtrain::storage::FindScheme(argv[2], &scheme);
  if (!st.ok()) return Fail("open", st);
  ckpt_opts.restore_chunk_bytes = opts.part_size;
  ckpt_opts.restore_threads = static_cast<int>(EnvInt("DT_BENCH_THREADS", scheme->transfer(opts).parallelism));
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
  // load, load-device: the state and the sink before the timing (the trainer's exist before its restore).
  dtrain::CpuAllocator host_alloc, pinned_alloc(/*pinned=*/true);
  dtrain::CudaCachingAllocator device_alloc(0);
  std::vector<std::unique_ptr<dtrain::Tensor>> tensors;
  std::vector<dtrain::runtime::StateSlice> slices;
  std::unique_ptr<dtrain::runtime::RestoreSink> sink;
  const bool device = mode == "load-device";
  auto make_sink = [&]() -> Status {
    DT_RETURN_IF_ERROR(MakeState(&mgr.store(), std::atoll(argv[3]),
                                 device ? static_cast<dtrain::Allocator*>(&device_alloc) : &host_alloc,
                                 mode == "load-fresh", &tensors, &slices));
    return dtrain::runtime::RestoreSink::Create(slices, device ? 0 : -1, device ? &pinned_alloc : &host_alloc,
                                                ckpt_opts.restore_chunk_bytes,
                                                static_cast<size_t>(ckpt_opts.restore_threads) + 2, &sink);
  };
  if (mode == "load" || device) {
    st = make_sink();
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
    if (mode == "load-fresh") st = make_sink();
    dtrain::runtime::LoadedCheckpoint loaded;
    if (st.ok()) st = mgr.Load(std::atoll(argv[3]), &loaded, sink.get());
    if (st.ok() && sink) st = sink->Finish();
    if (st.ok() && sink && sink->in_place().size() != slices.size()) st = Status::Internal("a file not in place");
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
