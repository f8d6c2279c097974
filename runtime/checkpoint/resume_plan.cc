#include "runtime/checkpoint/resume_plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

bool IsStepNumber(const std::string& s) {
  return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::string UtcStamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// The first of `base`, `base-2`, `base-3`, ... that does not exist: two moves within one second get two names.
std::string FreeLocalName(const std::string& base) {
  struct stat st;
  std::string name = base;
  for (int n = 2; ::stat(name.c_str(), &st) == 0; ++n) name = base + "-" + std::to_string(n);
  return name;
}

// Moves every checkpoint out of the store's way (see the header) and says what it did.
Status MoveAside(CheckpointManager* ckpt, const std::vector<CheckpointEntry>& entries, std::string* note) {
  std::string dir;
  if (storage::LocalDir(ckpt->url(), &dir)) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const std::string aside = FreeLocalName(dir + ".overwritten-" + UtcStamp());
    if (std::rename(dir.c_str(), aside.c_str()) != 0) {
      return Status::IoError("checkpoint.overwrite: cannot move " + dir + " aside to " + aside + ": " +
                             std::strerror(errno));
    }
    *note = "checkpoint.overwrite: moved the " + std::to_string(entries.size()) + " old step director" +
            (entries.size() == 1 ? "y" : "ies") + " of " + dir + " aside to " + aside;
    return Status::OK();
  }
  for (const CheckpointEntry& e : entries) {
    DT_RETURN_IF_ERROR(ckpt->store().Delete(e.dir + "/manifest.pb"));  // first: from here on a partial directory
    std::vector<storage::ObjectInfo> objects;
    DT_RETURN_IF_ERROR(ckpt->store().List(e.dir + "/", &objects));
    for (const storage::ObjectInfo& o : objects) DT_RETURN_IF_ERROR(ckpt->store().Delete(o.key));
  }
  DT_RETURN_IF_ERROR(ckpt->store().Delete("latest"));
  *note = "checkpoint.overwrite: deleted the " + std::to_string(entries.size()) + " old step director" +
          (entries.size() == 1 ? "y" : "ies") + " of " + ckpt->url();
  return Status::OK();
}

// "step-00000010, step-00000020" (at most 8, then how many more).
std::string DirList(const std::vector<CheckpointEntry>& entries) {
  std::string out;
  for (size_t i = 0; i < entries.size() && i < 8; ++i) out += (i ? ", " : "") + entries[i].dir;
  if (entries.size() > 8) out += ", ... (" + std::to_string(entries.size()) + " in all)";
  return out;
}

// Moves the step directories `newer` out of the store's way (resume=STEP with overwrite): a local store's into the
// sibling directory `<dir>.overwritten-<stamp>/`, an object store's under `overwritten-<stamp>/` in the same root
// (copied, then the originals deleted, manifest first). `latest` then names `step`.
Status MoveNewerAside(CheckpointManager* ckpt, const std::vector<CheckpointEntry>& newer, int64_t step,
                      std::string* note) {
  const std::string stamp = UtcStamp();
  std::string dir, aside;
  if (storage::LocalDir(ckpt->url(), &dir)) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    aside = FreeLocalName(dir + ".overwritten-" + stamp);
    if (::mkdir(aside.c_str(), 0755) != 0) {
      return Status::IoError("checkpoint.overwrite: cannot create " + aside + ": " + std::strerror(errno));
    }
    for (const CheckpointEntry& e : newer) {
      const std::string from = dir + "/" + e.dir, to = aside + "/" + e.dir;
      if (std::rename(from.c_str(), to.c_str()) != 0) {
        return Status::IoError("checkpoint.overwrite: cannot move " + from + " aside to " + to + ": " +
                               std::strerror(errno));
      }
    }
  } else {
    std::string prefix = "overwritten-" + stamp;
    for (int n = 2;; ++n) {  // a prefix of its own, as FreeLocalName
      std::vector<storage::ObjectInfo> taken;
      DT_RETURN_IF_ERROR(ckpt->store().List(prefix + "/", &taken));
      if (taken.empty()) break;
      prefix = "overwritten-" + stamp + "-" + std::to_string(n);
    }
    aside = ckpt->url() + "/" + prefix;
    for (const CheckpointEntry& e : newer) {
      std::vector<storage::ObjectInfo> objects;
      DT_RETURN_IF_ERROR(ckpt->store().List(e.dir + "/", &objects));
      for (const storage::ObjectInfo& o : objects) {
        std::string bytes;
        DT_RETURN_IF_ERROR(ckpt->store().Get(o.key, &bytes));
        DT_RETURN_IF_ERROR(ckpt->store().Put(prefix + "/" + o.key, bytes.data(), bytes.size()));
      }
      DT_RETURN_IF_ERROR(ckpt->store().Delete(e.dir + "/manifest.pb"));  // first: from here on a partial directory
      for (const storage::ObjectInfo& o : objects) DT_RETURN_IF_ERROR(ckpt->store().Delete(o.key));
    }
  }
  const std::string latest = CheckpointManager::StepDir(step) + "\n";
  DT_RETURN_IF_ERROR(ckpt->store().Put("latest", latest.data(), latest.size()));
  *note = "checkpoint.overwrite: moved the " + std::to_string(newer.size()) + " checkpoint(s) newer than step " +
          std::to_string(step) + " (" + DirList(newer) + ") aside to " + aside;
  return Status::OK();
}

// checkpoint.resume=STEP: that checkpoint, if it exists; newer checkpoints are never replaced without consent.
Status PlanStep(CheckpointManager* ckpt, const ResumeRequest& req, int64_t step, ResumePlan* out) {
  const std::string what = "checkpoint.resume=" + req.resume;
  std::vector<CheckpointEntry> entries;
  DT_RETURN_IF_ERROR(ckpt->List(&entries).WithContext(what));
  std::vector<CheckpointEntry> checkpoints, newer;  // directories with a manifest; those of later steps that read
  bool exists = false;
  for (const CheckpointEntry& e : entries) {
    exists = exists || e.step == step;
    if (!e.has_manifest) continue;
    checkpoints.push_back(e);
    proto::CheckpointManifest m;
    if (e.step > step && ckpt->ReadManifest(e.step, /*warn_legacy=*/false, &m).ok()) newer.push_back(e);
  }
  if (!exists) {
    return Status::InvalidArgument(
        what + ": step " + std::to_string(step) + " does not exist in " + ckpt->url() +
        (checkpoints.empty() ? " (it holds no checkpoint)" : " (its checkpoints: " + DirList(checkpoints) + ")"));
  }
  if (!newer.empty() && !req.overwrite) {
    return Status::InvalidArgument(
        what + ": " + ckpt->url() + " holds " + std::to_string(newer.size()) + " newer checkpoint(s) (" +
        DirList(newer) + ") that training on from step " + std::to_string(step) +
        " would replace (nothing was changed): resume from the newest with --resume auto, or train on from step " +
        std::to_string(step) +
        " with --overwrite (checkpoint.overwrite: true), which moves the newer ones aside first");
  }
  DT_RETURN_IF_ERROR(ckpt->Load(step, &out->loaded, req.sink).WithContext(what));
  if (!newer.empty() && req.writer) DT_RETURN_IF_ERROR(MoveNewerAside(ckpt, newer, step, &out->note));
  out->resume = true;
  out->run_id = out->loaded.manifest.run_id();
  return Status::OK();
}

}  // namespace

std::string NewRunId() {
  std::random_device rd;
  const uint64_t now = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t mix = (static_cast<uint64_t>(rd()) << 32 | rd()) ^ now ^ (static_cast<uint64_t>(::getpid()) << 48);
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, mix);
  return buf;
}

Status PlanResume(CheckpointManager* ckpt, const ResumeRequest& req, ResumePlan* out) {
  *out = ResumePlan();
  const std::string& url = ckpt->url();
  if (IsStepNumber(req.resume)) return PlanStep(ckpt, req, std::stoll(req.resume), out);
  if (req.resume != "auto" && req.resume != "never") {
    return Status::InvalidArgument("checkpoint.resume: expected auto, never or a step number, got '" + req.resume +
                                   "'");
  }
  std::vector<CheckpointEntry> entries;
  DT_RETURN_IF_ERROR(ckpt->List(&entries));
  int64_t newest = -1;  // the newest directory that claims to be a checkpoint (has a manifest)
  for (const CheckpointEntry& e : entries) {
    if (e.has_manifest) newest = e.step;
  }
  std::string refusal;
  if (req.resume == "auto") {
    std::vector<std::string> skipped;
    Status st = ckpt->LoadLatest(&out->loaded, &skipped, req.sink);
    if (st.ok()) {
      out->resume = true;
      out->run_id = out->loaded.manifest.run_id();
      return Status::OK();
    }
    if (st.code() != Status::Code::kNotFound) return st.WithContext("checkpoint.resume=auto in " + url);
    if (newest >= 0) {
      refusal = "checkpoint.resume=auto: none of the checkpoints in " + url +
                " verifies, and starting over would overwrite them (nothing was deleted):";
      for (const std::string& s : skipped) refusal += "\n  " + s;
      refusal +=
          "\nRepair or move them (`dtrain ckpt verify " + url +
          "` checks each), or start over with --overwrite (checkpoint.overwrite: true), which moves them aside first";
    }
  } else if (newest >= 0) {
    refusal = "checkpoint.resume=never, but " + url + " holds checkpoints (newest " +
              CheckpointManager::StepDir(newest) +
              "): resume from them with checkpoint.resume: auto (--resume auto), or start over with --overwrite "
              "(checkpoint.overwrite: true), which moves them aside first";
  }
  if (!refusal.empty() && !req.overwrite) return Status::InvalidArgument(refusal);
  if (!refusal.empty() && req.writer) DT_RETURN_IF_ERROR(MoveAside(ckpt, entries, &out->note));
  out->run_id = NewRunId();
  return Status::OK();
}

}  // namespace dtrain::runtime
