#pragma once
// CheckpointManager: complete training state in a Storage (file:// or s3://), one directory (object
// prefix) per step, verified on load.
//
// Layout under the store's root:
//   step-00000123/params.bin        flat f32 parameters (little-endian)
//   step-00000123/<state>.bin       optimizer state, one file per Optimizer::state() entry
//   step-00000123/manifest.pb       proto/checkpoint.proto: step, world size, files with sizes and
//                                   CRC32C, optimizer step, LR schedule, data-loader position, config,
//                                   run_id (lineage); sealed with the CRC32C of its own bytes
//                                   (core/sealed_bytes.h; a manifest without the seal reads with a warning)
//   latest                          "step-00000123\n", the newest saved checkpoint
// Save order: every data file, then manifest.pb, then `latest`, each a Storage::Put (atomic). A
// directory without a manifest that parses, is complete (its last field, created_unix_ms, is set:
// Save fills it in when 0, so a manifest cut short is caught even where the cut leaves valid protobuf)
// and whose files match their sizes and CRC32C is not a checkpoint: loads skip it (with a warning naming why) and
// retention deletes it once a newer valid checkpoint exists. `latest` is informational (tools, humans); loads never
// trust it blindly.
//
// Retention (after each Save): among the checkpoints of this run's lineage (manifest run_id ==
// run_id(), see set_run_id), keep the newest keep_last plus every one whose step is a multiple of
// keep_every (> 0) and always the save that just completed; delete the other checkpoints of the lineage
// and every partial directory older than the lineage's newest checkpoint. Checkpoints of another
// lineage, or whose manifest does not read, are never deleted. Deleting removes manifest.pb first, so a half-deleted
// directory is a partial one, and removes only files dtrain wrote, by name: manifest.pb and the files its manifest
// lists (a partial directory: those the lineage's newest manifest lists). Anything else in a step directory (a
// user's file) stays, and so does the directory, with a warning naming what was kept.
//
// Thread-safety: Save and ApplyRetention must not run concurrently with each other (one writer: the
// trainer's rank 0, through CheckpointWriter); List/Load may run from any thread at any time.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/checkpoint.pb.h"
#include "runtime/checkpoint/chunked_read.h"
#include "storage/storage.h"

namespace dtrain::runtime {

// A data file to save: `size` bytes at `data`, borrowed until Save returns.
struct CheckpointBlob {
  std::string name;  // file name inside the step directory, e.g. "params.bin"
  const void* data = nullptr;
  size_t size = 0;
  int64_t numel = 0;  // f32 elements
};

// The points of a Save, in order, where the phase hook runs (fault injection: docs/faults.md).
enum class CheckpointPhase {
  kSnapshot,        // the state is in host memory, nothing of the step written yet
  kData,            // the first data file is written, the others are not
  kBeforeManifest,  // every data file is written, the manifest is not
  kManifest,        // the manifest is written (the checkpoint exists), `latest` is not updated
  kLatest,          // `latest` is updated, retention has not run
  kRetention,       // retention deleted the manifest of an old checkpoint, not yet its data files
};
const char* CheckpointPhaseName(CheckpointPhase phase);  // "snapshot", "data", "before_manifest", ...
// Parses a CheckpointPhaseName; false for anything else.
bool ParseCheckpointPhase(const std::string& name, CheckpointPhase* out);

struct CheckpointOptions {
  int64_t keep_last = 3;   // >= 1
  int64_t keep_every = 0;  // 0 = off
  // Test hook (fault injection): runs at each phase of Save(step); an error ends the Save.
  std::function<Status(CheckpointPhase phase, int64_t step)> at_phase;
  // Load: files are read in chunks of this many bytes over this many threads (runtime/checkpoint/chunked_read.h).
  uint64_t restore_chunk_bytes = 16ull << 20;  // > 0, a multiple of 4 KiB
  int restore_threads = 4;                     // >= 1
};

// One step directory found in the store.
struct CheckpointEntry {
  int64_t step = 0;
  std::string dir;            // "step-00000123"
  bool has_manifest = false;  // present (not verified)
  uint64_t bytes = 0;         // all objects of the directory
};

struct LoadedCheckpoint {
  std::string dir;
  proto::CheckpointManifest manifest;
  std::map<std::string, std::string> files;  // name -> contents, each verified (empty when a LoadSink took them)
};

// Where Load puts the files' bytes, chunk by chunk (runtime/checkpoint/chunked_read.h: Acquire gives a chunk's
// buffer, Release hands it back filled and checksummed; the file indexes are the manifest's): the restore path of
// runtime/train puts each chunk straight into the training state, through a few pinned staging buffers on a GPU.
// A chunk handed back is not verified yet: if Load then fails, everything handed over so far is void (the sink must
// undo or ignore it). Without a sink, Load fills LoadedCheckpoint::files (std::string: zero-filled first).
class LoadSink : public ChunkSink {
 public:
  // Called on Load's thread once per Load, before any chunk, with the manifest (its files' sizes checked against
  // the store's). An error ends the Load.
  virtual Status Begin(const proto::CheckpointManifest& m) = 0;
};

class CheckpointManager {
 public:
  // Opens the store at `url` (storage/storage.h).
  static Status Open(const std::string& url, const storage::StorageOptions& storage_opts, const CheckpointOptions& opts,
                     std::unique_ptr<CheckpointManager>* out);
  // As Open, for read-only tools: a local URL whose directory does not exist is InvalidArgument
  // ("no such checkpoint directory ...") and nothing is created.
  static Status OpenExisting(const std::string& url, const storage::StorageOptions& storage_opts,
                             std::unique_ptr<CheckpointManager>* out);
  CheckpointManager(std::unique_ptr<storage::Storage> store, CheckpointOptions opts);

  static std::string StepDir(int64_t step);                         // "step-00000123"
  static bool ParseStepDir(const std::string& dir, int64_t* step);  // inverse of StepDir

  // Writes `blobs`, then the manifest (with `files` filled in: size, CRC32C; step from manifest.step()),
  // then `latest`, then applies retention. Blob names must be unique and not "manifest.pb".
  Status Save(proto::CheckpointManifest manifest, const std::vector<CheckpointBlob>& blobs);

  // Every step directory, ascending by step.
  Status List(std::vector<CheckpointEntry>* out);
  // Reads checkpoint `step` and verifies it: NotFound without a manifest; DataLoss (naming the file
  // and what differs) for an unparsable manifest, a missing file or a size/CRC32C mismatch. The files are
  // read in chunks on restore_threads threads, each chunk checksummed right after its read; into `sink`'s
  // buffers when one is given (out->files stays empty), else into out->files. On error *out is empty.
  Status Load(int64_t step, LoadedCheckpoint* out, LoadSink* sink = nullptr);
  // The newest checkpoint that Load()s. Each newer one that does not is logged as a warning and its
  // reason appended to *skipped (optional). NotFound when there is none.
  Status LoadLatest(LoadedCheckpoint* out, std::vector<std::string>* skipped = nullptr, LoadSink* sink = nullptr);
  Status ApplyRetention();
  // Reads, unseals and parses the manifest of `step` without reading its files (NotFound when absent, DataLoss naming
  // it when bad or incomplete): a checkpoint that claims to be complete.
  Status ReadManifest(int64_t step, bool warn_legacy, proto::CheckpointManifest* out);

  // The lineage that Save writes into manifests that carry none, and that retention deletes from.
  void set_run_id(std::string run_id) { run_id_ = std::move(run_id); }
  const std::string& run_id() const { return run_id_; }

  storage::Storage& store() { return *store_; }
  const std::string& url() const { return store_->url(); }

 private:
  // Retention after the save of `step` (-1: not inside a save, no phase hook).
  Status Retain(int64_t step);
  // Deletes the files of `e` named in `ours` (manifest.pb first); warns naming any other file, which stays.
  Status DeleteDir(const CheckpointEntry& e, const std::set<std::string>& ours, int64_t step);
  Status AtPhase(CheckpointPhase phase, int64_t step) const;

  std::unique_ptr<storage::Storage> store_;
  CheckpointOptions opts_;
  std::string run_id_;
};

}  // namespace dtrain::runtime
