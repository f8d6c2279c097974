#include "runtime/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <future>
#include <iterator>
#include <set>

#include "core/check.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/logging.h"
#include "core/parallel_for.h"
#include "core/sealed_bytes.h"
#include "runtime/checkpoint/chunked_read.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

constexpr const char* kManifest = "manifest.pb";
constexpr const char* kLatest = "latest";
constexpr const char* kPrefix = "step-";
// Files written at once (Save). Checkpoints hold a few large files: each Put of one is itself parallel on S3
// (parts); on a local disk several streams keep an NVMe queue busier than one. (Load reads in chunks instead.)
constexpr size_t kParallelFiles = 4;

constexpr const char* kPhaseNames[] = {"snapshot", "data", "before_manifest", "manifest", "latest", "retention"};

// Every parameter slice must lie inside params.bin (sized by its manifest entry; the file itself is
// checked against that entry), so tools can copy slices out without further checks.
Status CheckParamSlices(const std::string& dir, const proto::CheckpointManifest& m) {
  int64_t numel = 0;
  for (const proto::CheckpointFile& f : m.files()) {
    if (f.name() == "params.bin") numel = static_cast<int64_t>(std::min<uint64_t>(f.size() / 4, INT64_MAX));
  }
  for (const proto::ParamSlice& p : m.params()) {
    if (p.offset() < 0 || p.numel() < 0 || p.offset() > numel - p.numel()) {
      return Status::DataLoss(dir + "/" + kManifest + ": parameter '" + p.name() + "' (offset " +
                              std::to_string(p.offset()) + ", " + std::to_string(p.numel()) +
                              " values) lies outside params.bin (" + std::to_string(numel) + " values)");
    }
  }
  return Status::OK();
}

// The sink of a Load without one: the files as strings in LoadedCheckpoint::files.
class StringSink : public LoadSink {
 public:
  explicit StringSink(std::map<std::string, std::string>* files) : files_(files) {}
  Status Begin(const proto::CheckpointManifest& m) override {
    for (const proto::CheckpointFile& f : m.files()) {
      std::string& s = (*files_)[f.name()];
      s.resize(f.size());
      data_.push_back(s.data());
    }
    return Status::OK();
  }
  Status Acquire(size_t file, uint64_t offset, uint64_t, char** out) override {
    *out = data_[file] + offset;
    return Status::OK();
  }
  Status Release(size_t, uint64_t, uint64_t, char*, bool) override { return Status::OK(); }

 private:
  std::map<std::string, std::string>* files_;
  std::vector<char*> data_;  // by manifest index
};

}  // namespace

const char* CheckpointPhaseName(CheckpointPhase phase) { return kPhaseNames[static_cast<int>(phase)]; }

bool ParseCheckpointPhase(const std::string& name, CheckpointPhase* out) {
  for (int i = 0; i < static_cast<int>(std::size(kPhaseNames)); ++i) {
    if (name == kPhaseNames[i]) {
      *out = static_cast<CheckpointPhase>(i);
      return true;
    }
  }
  return false;
}

Status CheckpointManager::Open(const std::string& url, const storage::StorageOptions& storage_opts,
                               const CheckpointOptions& opts, std::unique_ptr<CheckpointManager>* out) {
  std::unique_ptr<storage::Storage> store;
  DT_RETURN_IF_ERROR(storage::Storage::Open(url, storage_opts, &store));
  *out = std::make_unique<CheckpointManager>(std::move(store), opts);
  return Status::OK();
}

Status CheckpointManager::OpenExisting(const std::string& url, const storage::StorageOptions& storage_opts,
                                       std::unique_ptr<CheckpointManager>* out) {
  std::string dir;
  if (storage::LocalDir(url, &dir) && !dir.empty()) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) {
      return Status::InvalidArgument("no such checkpoint directory '" + dir + "' (" + std::strerror(errno) + ")");
    }
    if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("'" + dir + "' is not a checkpoint directory");
  }
  return Open(url, storage_opts, CheckpointOptions(), out);
}

CheckpointManager::CheckpointManager(std::unique_ptr<storage::Storage> store, CheckpointOptions opts)
    : store_(std::move(store)), opts_(std::move(opts)) {}

std::string CheckpointManager::StepDir(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08" PRId64, step);
  return buf;
}

bool CheckpointManager::ParseStepDir(const std::string& dir, int64_t* step) {
  const size_t n = std::char_traits<char>::length(kPrefix);
  if (dir.compare(0, n, kPrefix) != 0 || dir.size() == n || dir.size() > n + 18) return false;
  int64_t v = 0;
  for (size_t i = n; i < dir.size(); ++i) {
    if (dir[i] < '0' || dir[i] > '9') return false;
    v = v * 10 + (dir[i] - '0');
  }
  *step = v;
  return true;
}

Status CheckpointManager::Save(proto::CheckpointManifest manifest, const std::vector<CheckpointBlob>& blobs) {
  const int64_t step = manifest.step();
  const std::string dir = StepDir(step);
  manifest.clear_files();
  if (manifest.created_unix_ms() <= 0)
    manifest.set_created_unix_ms(static_cast<int64_t>(1e3 * WallSeconds()));  // Load requires it
  std::set<std::string> names;
  DT_RETURN_IF_ERROR(AtPhase(CheckpointPhase::kSnapshot, step));
  for (const CheckpointBlob& b : blobs) {
    if (b.name == kManifest || !names.insert(b.name).second) {
      return Status::InvalidArgument("checkpoint file name '" + b.name + "' is reserved or used twice");
    }
  }
  // The CRC32C of every file is computed on its own thread while the files are written (both only read
  // the snapshot); the manifest that needs them comes after both.
  // (A std::async future's destructor waits for it: every return below leaves no thread behind.)
  std::future<std::vector<uint32_t>> crc_future = std::async(std::launch::async, [&blobs] {
    std::vector<uint32_t> crcs;
    for (const CheckpointBlob& b : blobs) crcs.push_back(::dtrain::Crc32c(b.data, b.size));
    return crcs;
  });
  auto put = [&](size_t i) { return store_->Put(dir + "/" + blobs[i].name, blobs[i].data, blobs[i].size); };
  // The first file alone (the "data" phase: one file written, the others not), then the rest in parallel:
  // each Put is atomic on its own, and none is visible as a checkpoint before the manifest.
  if (!blobs.empty()) {
    DT_RETURN_IF_ERROR(put(0));
    DT_RETURN_IF_ERROR(AtPhase(CheckpointPhase::kData, step));
  }
  DT_RETURN_IF_ERROR(
      ParallelFor(blobs.empty() ? 0 : blobs.size() - 1, kParallelFiles, [&](size_t i) { return put(i + 1); }));
  DT_RETURN_IF_ERROR(AtPhase(CheckpointPhase::kBeforeManifest, step));
  const std::vector<uint32_t> crcs = crc_future.get();
  for (size_t i = 0; i < blobs.size(); ++i) {
    proto::CheckpointFile* f = manifest.add_files();
    f->set_name(blobs[i].name);
    f->set_size(blobs[i].size);
    f->set_crc32c(crcs[i]);
    f->set_dtype("f32");
    f->set_numel(blobs[i].numel);
  }
  if (manifest.run_id().empty()) manifest.set_run_id(run_id_);
  std::string payload;
  if (!manifest.SerializeToString(&payload)) return Status::Internal("cannot serialize the checkpoint manifest");
  const std::string bytes = Seal(payload);
  // The manifest makes the checkpoint exist; `latest` moves only once it is durable (Put is atomic+fsynced).
  DT_RETURN_IF_ERROR(store_->Put(dir + "/" + kManifest, bytes.data(), bytes.size()));
  DT_RETURN_IF_ERROR(AtPhase(CheckpointPhase::kManifest, step));
  const std::string latest = dir + "\n";
  DT_RETURN_IF_ERROR(store_->Put(kLatest, latest.data(), latest.size()));
  DT_RETURN_IF_ERROR(AtPhase(CheckpointPhase::kLatest, step));
  return Retain(step).WithContext(dir + " is complete, but retention failed");
}

Status CheckpointManager::AtPhase(CheckpointPhase phase, int64_t step) const {
  return opts_.at_phase ? opts_.at_phase(phase, step) : Status::OK();
}

Status CheckpointManager::List(std::vector<CheckpointEntry>* out) {
  out->clear();
  std::vector<storage::ObjectInfo> objects;
  DT_RETURN_IF_ERROR(store_->List(kPrefix, &objects));
  std::map<int64_t, CheckpointEntry> by_step;
  for (const storage::ObjectInfo& o : objects) {
    const auto slash = o.key.find('/');
    if (slash == std::string::npos) continue;
    const std::string dir = o.key.substr(0, slash);
    int64_t step = 0;
    if (!ParseStepDir(dir, &step)) continue;
    CheckpointEntry& e = by_step[step];
    e.step = step;
    e.dir = dir;
    e.bytes += o.size;
    if (o.key.substr(slash + 1) == kManifest) e.has_manifest = true;
  }
  for (auto& kv : by_step) out->push_back(kv.second);
  return Status::OK();
}

Status CheckpointManager::ReadManifest(int64_t step, bool warn_legacy, proto::CheckpointManifest* out) {
  const std::string dir = StepDir(step);
  const std::string name = url() + "/" + dir + "/" + kManifest;
  std::string bytes;
  Status st = store_->Get(dir + "/" + kManifest, &bytes);
  if (st.code() == Status::Code::kNotFound) {
    return Status::NotFound(dir + ": no " + kManifest + " (an incomplete save)");
  }
  DT_RETURN_IF_ERROR(st);
  std::string payload;
  bool legacy = false;
  DT_RETURN_IF_ERROR(Unseal(name, bytes, &payload, &legacy));
  if (legacy && warn_legacy && FirstLegacyWarning(name)) {
    DT_LOG_WARN(kRuntime, "{}: written without a checksum of its own bytes (an older dtrain): read unverified", name);
  }
  proto::CheckpointManifest& m = *out;
  if (!m.ParseFromString(payload)) {
    return Status::DataLoss(name + ": does not parse (" + std::to_string(bytes.size()) +
                            " bytes: truncated or corrupt)");
  }
  if (m.created_unix_ms() <= 0) {  // the last field: a cut at a field boundary parses, but without it
    return Status::DataLoss(name + ": incomplete (" + std::to_string(bytes.size()) +
                            " bytes, no created_unix_ms, the last field): truncated");
  }
  return Status::OK();
}

Status CheckpointManager::Load(int64_t step, LoadedCheckpoint* out, LoadSink* sink) {
  *out = LoadedCheckpoint();
  const std::string dir = StepDir(step);
  proto::CheckpointManifest m;
  DT_RETURN_IF_ERROR(ReadManifest(step, /*warn_legacy=*/true, &m));
  Status st;
  if (m.step() != step) {
    return Status::DataLoss(dir + "/" + kManifest + ": says step " + std::to_string(m.step()));
  }
  std::set<std::string> names;
  for (const proto::CheckpointFile& f : m.files()) {
    if (f.name().empty() || f.name().find('/') != std::string::npos || f.name() == "." || f.name() == "..") {
      return Status::DataLoss(dir + "/" + kManifest + ": file name '" + f.name() + "' is not a plain file name");
    }
    if (!names.insert(f.name()).second) {
      return Status::DataLoss(dir + "/" + kManifest + ": file '" + f.name() + "' is listed twice");
    }
  }
  DT_RETURN_IF_ERROR(CheckParamSlices(dir, m));
  // Every file's real size first (one listing): a missing file or one whose size differs from the manifest's is
  // reported before any buffer is allocated, so a manifest cannot make Load allocate what is not there.
  std::vector<storage::ObjectInfo> objects;
  DT_RETURN_IF_ERROR(store_->List(dir + "/", &objects));
  std::map<std::string, uint64_t> sizes;
  for (const storage::ObjectInfo& o : objects) sizes[o.key] = o.size;
  for (const proto::CheckpointFile& f : m.files()) {
    const std::string key = dir + "/" + f.name();
    const auto it = sizes.find(key);
    if (it == sizes.end()) return Status::DataLoss(key + ": missing (listed in the manifest)");
    if (it->second != f.size()) {
      return Status::DataLoss(key + ": " + std::to_string(it->second) + " bytes, the manifest says " +
                              std::to_string(f.size()));
    }
  }
  // The sink first (the sizes are checked), then all files in chunks over a few threads.
  StringSink strings(&out->files);
  if (sink == nullptr) sink = &strings;
  std::vector<ChunkedFile> files;
  for (const proto::CheckpointFile& f : m.files()) files.push_back({dir + "/" + f.name(), f.size(), f.crc32c()});
  st = sink->Begin(m);
  if (st.ok()) {
    const ChunkedReadOptions read_opts{opts_.restore_chunk_bytes, static_cast<size_t>(opts_.restore_threads)};
    st = ReadChunked(store_.get(), files, read_opts, sink);
  }
  if (!st.ok()) {
    out->files.clear();
    return st;
  }
  out->dir = dir;
  out->manifest = std::move(m);
  return Status::OK();
}

Status CheckpointManager::LoadLatest(LoadedCheckpoint* out, std::vector<std::string>* skipped, LoadSink* sink) {
  std::vector<CheckpointEntry> entries;
  DT_RETURN_IF_ERROR(List(&entries));
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    Status st = Load(it->step, out, sink);
    if (st.ok()) return st;
    // Storage failures (network, permissions) are not evidence of a bad checkpoint: report them.
    if (st.code() != Status::Code::kNotFound && st.code() != Status::Code::kDataLoss) return st;
    DT_LOG_WARN(kRuntime, "checkpoint {}/{} skipped: {}", url(), it->dir, st.message());
    if (skipped != nullptr) skipped->push_back(it->dir + ": " + st.message());
  }
  return Status::NotFound("no valid checkpoint in " + url() +
                          (entries.empty() ? "" : " (" + std::to_string(entries.size()) + " skipped)"));
}

Status CheckpointManager::DeleteDir(const CheckpointEntry& e, const std::set<std::string>& ours, int64_t step) {
  std::vector<storage::ObjectInfo> objects;
  DT_RETURN_IF_ERROR(store_->List(e.dir + "/", &objects));
  const std::string prefix = e.dir + "/";
  // The manifest goes first: from then on the directory is a partial one, never a torn checkpoint.
  if (e.has_manifest) DT_RETURN_IF_ERROR(store_->Delete(prefix + kManifest));
  if (step >= 0) DT_RETURN_IF_ERROR(AtPhase(CheckpointPhase::kRetention, step));
  // Only what dtrain wrote, by name: a file someone else put into the directory is theirs.
  std::vector<std::string> kept;
  bool deleted = e.has_manifest;
  for (const storage::ObjectInfo& o : objects) {
    const std::string name = o.key.substr(prefix.size());
    if (name == kManifest) continue;
    if (ours.count(name) == 0) {
      kept.push_back(name);
      continue;
    }
    DT_RETURN_IF_ERROR(store_->Delete(o.key));
    deleted = true;
  }
  if (!kept.empty()) {
    std::string names;
    for (const std::string& k : kept) names += (names.empty() ? "" : ", ") + k;
    // Once per directory: later passes find only the foreign files and say so at debug level.
    if (deleted) {
      DT_LOG_WARN(kRuntime, "retention: kept {}/{}: it holds files dtrain did not write ({}); remove them by hand",
                  url(), e.dir, names);
    } else {
      DT_LOG_DEBUG(kRuntime, "retention: {}/{} holds only files dtrain did not write ({})", url(), e.dir, names);
    }
  }
  return Status::OK();
}

Status CheckpointManager::ApplyRetention() { return Retain(-1); }

Status CheckpointManager::Retain(int64_t step) {
  std::vector<CheckpointEntry> entries;
  DT_RETURN_IF_ERROR(List(&entries));
  // Only this run's lineage is ours to delete: another run's checkpoints (or ones whose manifest does not
  // read, so whose lineage is unknown) are kept whatever their step.
  std::vector<int64_t> valid;
  std::map<int64_t, std::set<std::string>> files;  // of each valid one: manifest.pb and the files its manifest lists
  for (const CheckpointEntry& e : entries) {
    if (!e.has_manifest) continue;
    proto::CheckpointManifest m;
    if (!ReadManifest(e.step, /*warn_legacy=*/false, &m).ok() || m.run_id() != run_id_) continue;
    valid.push_back(e.step);
    std::set<std::string>& names = files[e.step];
    names.insert(kManifest);
    for (const proto::CheckpointFile& f : m.files()) names.insert(f.name());
  }
  if (valid.empty()) return Status::OK();
  const int64_t newest = valid.back();
  std::set<int64_t> keep(valid.end() - std::min<size_t>(valid.size(), opts_.keep_last), valid.end());
  for (int64_t s : valid) {
    if (opts_.keep_every > 0 && s % opts_.keep_every == 0) keep.insert(s);
  }
  if (step >= 0) keep.insert(step);  // never the save that just completed
  const std::set<int64_t> ours(valid.begin(), valid.end());
  for (const CheckpointEntry& e : entries) {
    if (keep.count(e.step) != 0 || e.step > newest) continue;
    if (e.has_manifest && ours.count(e.step) == 0) continue;
    DT_LOG_DEBUG(kRuntime, "retention: deleting {}/{}{}", url(), e.dir, e.has_manifest ? "" : " (partial)");
    // A partial directory's files are named as the lineage's newest checkpoint names its own.
    DT_RETURN_IF_ERROR(DeleteDir(e, files.at(e.has_manifest ? e.step : newest), step));
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
