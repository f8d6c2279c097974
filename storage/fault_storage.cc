#include "storage/fault_storage.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include "core/check.h"
#include "core/logging.h"

namespace dtrain::storage {
namespace {

constexpr const char* kVar = "DTRAIN_STORAGE_FAULT";
constexpr const char* kForm =
    "expected op=put|get|head|list|delete|any,key=PATTERN,nth=N|every,action=error|hang|partial"
    "[,seconds=S (hang)][,bytes=K (partial)]";

bool ParseCount(const std::string& s, int64_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) return false;
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

bool ParseSeconds(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return *end == '\0' && *out > 0 && *out < 1e7;
}

bool IsGlob(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

}  // namespace

// ---- StorageFaultSpec ------------------------------------------------------------------------

const char* StorageFaultSpec::OpName(Op op) {
  switch (op) {
    case Op::kPut:
      return "put";
    case Op::kGet:
      return "get";
    case Op::kHead:
      return "head";
    case Op::kList:
      return "list";
    case Op::kDelete:
      return "delete";
    case Op::kAny:
      break;
  }
  return "any";
}

Status StorageFaultSpec::Parse(const std::string& value, StorageFaultSpec* out) {
  StorageFaultSpec s;
  s.text = value;
  auto bad = [&value](const std::string& why) {
    return Status::InvalidArgument(std::string(kVar) + "='" + value + "': " + why + "; " + kForm);
  };
  bool have_action = false, have_seconds = false, have_bytes = false;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("'" + item + "' is not key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "op") {
      static const Op kOps[] = {Op::kAny, Op::kPut, Op::kGet, Op::kHead, Op::kList, Op::kDelete};
      bool found = false;
      for (Op op : kOps) {
        if (v == OpName(op)) {
          s.op = op;
          found = true;
        }
      }
      if (!found) return bad("unknown op '" + v + "'");
    } else if (k == "key") {
      s.key = v;
    } else if (k == "nth") {
      if (v == "every") {
        s.nth = 0;
      } else if (!ParseCount(v, &s.nth) || s.nth == 0) {
        return bad("nth must be a call number >= 1 or 'every', got '" + v + "'");
      }
    } else if (k == "action") {
      if (v == "error") {
        s.action = Action::kError;
      } else if (v == "hang") {
        s.action = Action::kHang;
      } else if (v == "partial") {
        s.action = Action::kPartial;
      } else {
        return bad("unknown action '" + v + "'");
      }
      have_action = true;
    } else if (k == "seconds") {
      if (!ParseSeconds(v, &s.hang_s)) return bad("seconds must be a number > 0, got '" + v + "'");
      have_seconds = true;
    } else if (k == "bytes") {
      int64_t n = 0;
      if (!ParseCount(v, &n)) return bad("bytes must be a byte count >= 0, got '" + v + "'");
      s.bytes = static_cast<uint64_t>(n);
      have_bytes = true;
    } else {
      return bad("unknown key '" + k + "'");
    }
  }
  if (!have_action) return bad("no action");
  if (have_seconds && s.action != Action::kHang) return bad("seconds= is for action=hang");
  if (have_bytes != (s.action == Action::kPartial)) return bad("action=partial needs bytes= (and only it takes it)");
  if (s.action == Action::kPartial && s.op != Op::kPut && s.op != Op::kGet) {
    return bad("action=partial needs op=put or op=get");
  }
  *out = std::move(s);
  return Status::OK();
}

bool StorageFaultSpec::Matches(Op call_op, const std::string& k) const {
  if (op != Op::kAny && op != call_op) return false;
  if (key.empty()) return true;
  if (IsGlob(key)) return ::fnmatch(key.c_str(), k.c_str(), 0) == 0;
  return k.find(key) != std::string::npos;
}

// ---- FaultStorage ----------------------------------------------------------------------------

FaultStorage::FaultStorage(std::unique_ptr<Storage> inner, StorageFaultSpec spec)
    : inner_(std::move(inner)), spec_(std::move(spec)) {}

Status FaultStorage::WrapFromEnv(std::unique_ptr<Storage>* store) {
  const char* env = std::getenv(kVar);
  if (env == nullptr || *env == '\0') return Status::OK();
  StorageFaultSpec spec;
  DT_RETURN_IF_ERROR(StorageFaultSpec::Parse(env, &spec));
  DT_LOG_WARN(kRuntime, "{}={}: injecting storage faults into {}", kVar, spec.text, (*store)->url());
  *store = std::make_unique<FaultStorage>(std::move(*store), std::move(spec));
  return Status::OK();
}

void FaultStorage::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
}

std::string FaultStorage::What(Op op, const std::string& key) const {
  return std::string(StorageFaultSpec::OpName(op)) + " " + url() + "/" + key;
}

bool FaultStorage::Selected(Op op, const std::string& key) {
  if (!spec_.Matches(op, key)) return false;
  const int64_t n = ++matched_;
  return spec_.nth == 0 || n == spec_.nth;
}

Status FaultStorage::Inject(Op op, const std::string& key) {
  const std::string what = What(op, key);
  if (spec_.action == StorageFaultSpec::Action::kError) {
    return Status::IoError(what + ": injected storage fault (" + kVar + "=" + spec_.text + ")");
  }
  // Hang.
  DT_LOG_WARN(kRuntime, "{}={}: {} hangs {}", kVar, spec_.text, what,
              spec_.hang_s > 0 ? fmt::format("{:g} s", spec_.hang_s) : std::string("until cancelled"));
  std::unique_lock<std::mutex> lock(mu_);
  if (spec_.hang_s > 0) {
    cv_.wait_for(lock, std::chrono::duration<double>(spec_.hang_s), [this] { return cancelled_; });
    return Status::OK();  // slow, not broken: the real call runs now
  }
  cv_.wait(lock, [this] { return cancelled_; });
  return Status::Aborted(what + ": injected hang cancelled (" + kVar + "=" + spec_.text + ")");
}

Status FaultStorage::Put(const std::string& key, const void* data, size_t size) {
  if (!Selected(Op::kPut, key)) return inner_->Put(key, data, size);
  if (spec_.action != StorageFaultSpec::Action::kPartial) {
    DT_RETURN_IF_ERROR(Inject(Op::kPut, key));
    return inner_->Put(key, data, size);
  }
  const size_t kept = static_cast<size_t>(std::min<uint64_t>(spec_.bytes, size));
  DT_LOG_WARN(kRuntime, "{}={}: {}: storing {} of {} bytes and reporting success", kVar, spec_.text,
              What(Op::kPut, key), kept, size);
  return inner_->Put(key, data, kept);
}

Status FaultStorage::Get(const std::string& key, std::string* out) {
  if (!Selected(Op::kGet, key)) return inner_->Get(key, out);
  if (spec_.action != StorageFaultSpec::Action::kPartial) {
    DT_RETURN_IF_ERROR(Inject(Op::kGet, key));
    return inner_->Get(key, out);
  }
  DT_RETURN_IF_ERROR(inner_->Get(key, out));
  if (out->size() > spec_.bytes) out->resize(spec_.bytes);
  return Status::OK();
}

Status FaultStorage::GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) {
  if (!Selected(Op::kGet, key)) return inner_->GetRange(key, offset, size, out);
  if (spec_.action != StorageFaultSpec::Action::kPartial) {
    DT_RETURN_IF_ERROR(Inject(Op::kGet, key));
    return inner_->GetRange(key, offset, size, out);
  }
  DT_RETURN_IF_ERROR(inner_->GetRange(key, offset, size, out));
  if (out->size() > spec_.bytes) out->resize(spec_.bytes);
  return Status::OK();
}

Status FaultStorage::Head(const std::string& key, ObjectInfo* out) {
  if (Selected(Op::kHead, key)) DT_RETURN_IF_ERROR(Inject(Op::kHead, key));
  return inner_->Head(key, out);
}

Status FaultStorage::List(const std::string& prefix, std::vector<ObjectInfo>* out) {
  if (Selected(Op::kList, prefix)) DT_RETURN_IF_ERROR(Inject(Op::kList, prefix + "*"));
  return inner_->List(prefix, out);
}

Status FaultStorage::Delete(const std::string& key) {
  if (Selected(Op::kDelete, key)) DT_RETURN_IF_ERROR(Inject(Op::kDelete, key));
  return inner_->Delete(key);
}

}  // namespace dtrain::storage
