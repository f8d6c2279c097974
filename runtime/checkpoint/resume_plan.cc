#include "runtime/checkpoint/resume_plan.h"

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

// Moves every checkpoint out of the store's way (see the header) and says what it did.
Status MoveAside(CheckpointManager* ckpt, const std::vector<CheckpointEntry>& entries, std::string* note) {
  std::string dir;
  if (storage::LocalDir(ckpt->url(), &dir)) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const std::string aside = dir + ".overwritten-" + UtcStamp();
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
  if (IsStepNumber(req.resume)) {
    DT_RETURN_IF_ERROR(
        ckpt->Load(std::stoll(req.resume), &out->loaded, req.sink).WithContext("checkpoint.resume=" + req.resume));
    out->resume = true;
    out->run_id = out->loaded.manifest.run_id();
    return Status::OK();
  }
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
