#include "runtime/checkpoint/export_target.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "core/check.h"
#include "core/file_guard.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/store_owner.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool EmptyDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return false;
  bool empty = true;
  for (dirent* e; empty && (e = ::readdir(d)) != nullptr;) {
    const std::string n = e->d_name;
    empty = n == "." || n == "..";
  }
  ::closedir(d);
  return empty;
}

// A checkpoint store's root or one of its step directories.
bool LooksLikeStore(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  const std::string base = slash == std::string::npos ? dir : dir.substr(slash + 1);
  int64_t step = 0;
  if (CheckpointManager::ParseStepDir(base, &step) && Exists(dir + "/manifest.pb")) return true;
  if (Exists(dir + "/" + StoreOwner::kKey)) return true;
  if (!Exists(dir + "/latest")) return false;
  // `latest` alone is a common name: a store also holds a step directory.
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  for (dirent* e; !found && (e = ::readdir(d)) != nullptr;) found = CheckpointManager::ParseStepDir(e->d_name, &step);
  ::closedir(d);
  return found;
}

// The checkpoint store at `path` or above it (its resolved directory), or "".
std::string StoreAbove(const std::string& path) {
  std::string dir = path;
  if (!IsDir(dir)) {
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  }
  char buf[PATH_MAX];
  while (::realpath(dir.c_str(), buf) == nullptr) {  // a directory that --format hf would create
    const size_t slash = dir.find_last_of('/');
    if (slash == std::string::npos) {
      dir = ".";
      break;
    }
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  if (::realpath(dir.c_str(), buf) == nullptr) return "";
  for (std::string d = buf;;) {
    if (LooksLikeStore(d)) return d;
    if (d == "/") return "";
    const size_t slash = d.find_last_of('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
}

}  // namespace

Status ClaimExportTarget(const ExportTarget& t, std::string* note) {
  if (note != nullptr) note->clear();
  DT_CHECK_ARG(!t.out.empty(), "--out must be set");
  std::string source;
  if (storage::LocalDir(t.source_url, &source) && PathWithin(t.out, source)) {
    return Status::InvalidArgument("--out '" + t.out + "' lies inside the checkpoint store it exports (" + source +
                                   "): the export would replace a file of what it reads; write it elsewhere");
  }
  if (!source.empty() && Exists(t.out) && PathWithin(source, t.out)) {
    return Status::InvalidArgument("--out '" + t.out + "' holds the checkpoint store it exports (" + source +
                                   "): write it elsewhere");
  }
  const std::string store = StoreAbove(t.out);
  if (!store.empty() && !t.overwrite) {
    return Status::InvalidArgument("--out '" + t.out + "' lies inside the checkpoint store " + store +
                                   ": an export there can replace a checkpoint's file, and retention may delete it; "
                                   "write it elsewhere, or pass --overwrite to write there anyway");
  }
  if (!Exists(t.out) || (t.directory && IsDir(t.out) && EmptyDir(t.out))) return Status::OK();
  if (!t.overwrite) {
    return Status::InvalidArgument("--out '" + t.out + "' exists: dtrain ckpt export does not replace it; choose " +
                                   "another path, or pass --overwrite to move it aside (to " + t.out +
                                   ".replaced-<time>) first");
  }
  std::string moved;
  DT_RETURN_IF_ERROR(MoveAside(t.out, &moved));
  if (note != nullptr) *note = "moved the existing '" + t.out + "' aside to '" + moved + "'";
  return Status::OK();
}

}  // namespace dtrain::runtime
