#include "runtime/checkpoint/store_owner.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/clock.h"
#include "core/logging.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

std::string HostName() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "?";
}

// "key=value" lines.
std::map<std::string, std::string> ParseOwner(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

std::string Describe(const std::map<std::string, std::string>& kv, double now) {
  const auto get = [&](const char* k) {
    auto it = kv.find(k);
    return it == kv.end() ? std::string("?") : it->second;
  };
  char age[32];
  std::snprintf(age, sizeof(age), "%.0f", now - std::atof(get("heartbeat").c_str()));
  return "host " + get("host") + " pid " + get("pid") + " (started at unix time " + get("started") +
         ", last heartbeat " + age + " s ago)";
}

// True when `kv` names this host and a pid that no longer exists here: its job died (the heartbeat may still be young,
// e.g. it died because the store was unreachable).
bool DeadOnThisHost(const std::map<std::string, std::string>& kv) {
  const auto host = kv.find("host");
  const auto pid = kv.find("pid");
  if (host == kv.end() || pid == kv.end() || host->second != HostName()) return false;
  const std::string& p = pid->second;
  if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  return ::kill(static_cast<pid_t>(std::stol(p)), 0) != 0 && errno == ESRCH;
}

}  // namespace

Status StoreOwner::Acquire(storage::Storage* store, const Options& options, std::unique_ptr<StoreOwner>* out,
                           std::string* note) {
  DT_CHECK_ARG(store != nullptr && out != nullptr, "store and out must be set");
  if (note != nullptr) note->clear();
  std::string dir;
  if (options.lock_local_dirs && storage::LocalDir(store->url(), &dir)) {
    std::unique_ptr<FileLock> lock;
    DT_RETURN_IF_ERROR(FileLock::Acquire(LockSpec(dir, store->url()), &lock, note));
    std::unique_ptr<StoreOwner> owner(new StoreOwner(store, options, ""));  // private constructor
    owner->lock_ = std::move(lock);
    *out = std::move(owner);
    return Status::OK();
  }
  const std::string where = store->url() + "/" + kKey;
  std::string text;
  Status st = store->Get(kKey, &text);
  if (!st.ok() && st.code() != Status::Code::kNotFound) return st.WithContext("reading " + where);
  const double now = WallSeconds();
  if (st.ok()) {
    const auto kv = ParseOwner(text);
    const double beat = kv.count("heartbeat") ? std::atof(kv.at("heartbeat").c_str()) : 0;
    const bool dead_here = DeadOnThisHost(kv);
    if (now - beat < options.ttl_s && !dead_here) {
      return Status::InvalidArgument("checkpoint.url " + store->url() +
                                     " is in use by another job: " + Describe(kv, now) +
                                     ". Two jobs writing one checkpoint root mix their "
                                     "checkpoints: give this one another checkpoint.url, or stop the other");
    }
    if (note != nullptr) {
      *note = "took over " + where + " from a job that stopped: " + Describe(kv, now) +
              (dead_here ? " (that pid no longer exists on this host)" : "");
    }
  }
  std::random_device rd;
  char token[33];
  std::snprintf(token, sizeof(token), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  std::unique_ptr<StoreOwner> owner(new StoreOwner(store, options, token));  // private constructor
  owner->started_ = now;
  DT_RETURN_IF_ERROR(owner->Write());
  std::this_thread::sleep_for(std::chrono::duration<double>(options.settle_s));
  DT_RETURN_IF_ERROR(store->Get(kKey, &text).WithContext("reading back " + where));
  const auto kv = ParseOwner(text);
  if (kv.count("token") == 0 || kv.at("token") != owner->token_) {
    owner->token_.clear();  // not ours: the destructor must not delete it
    return Status::InvalidArgument("checkpoint.url " + store->url() + " was claimed at the same moment by " +
                                   Describe(kv, WallSeconds()) + ": two jobs must not share a checkpoint root");
  }
  *out = std::move(owner);
  return Status::OK();
}

FileLock::Spec StoreOwner::LockSpec(const std::string& dir, const std::string& url) {
  return {dir, kKey, "checkpoint.url " + url,
          "give this job another checkpoint.url (two jobs writing one checkpoint root mix their checkpoints)",
          /*remove_on_release=*/true};
}

Status StoreOwner::Write() {
  last_write_ = WallSeconds();
  std::string text = "token=" + token_ + "\nhost=" + HostName() + "\npid=" + std::to_string(::getpid()) +
                     "\nstarted=" + std::to_string(static_cast<int64_t>(started_)) +
                     "\nheartbeat=" + std::to_string(last_write_) + "\n";
  return store_->Put(kKey, text.data(), text.size()).WithContext("writing " + store_->url() + "/" + kKey);
}

bool StoreOwner::Due() const { return WallSeconds() - last_write_ >= options_.ttl_s / 4; }

Status StoreOwner::Refresh() {
  if (lock_ != nullptr) {
    last_write_ = WallSeconds();
    if (lock_->StillAtPath()) return Status::OK();
    // The root was moved away under the lock (its old file goes with it): lock the root that is there now.
    std::string dir;
    storage::LocalDir(store_->url(), &dir);
    std::unique_ptr<FileLock> lock;
    const Status st = FileLock::Acquire(LockSpec(dir, store_->url()), &lock);
    if (!st.ok()) {
      return Status::FailedPrecondition("checkpoint.url " + store_->url() +
                                        " was moved away under this job's lock and another job holds it now; "
                                        "stopping so the two do not mix checkpoints: " +
                                        st.message());
    }
    lock_ = std::move(lock);  // the old lock's file, elsewhere now, is emptied: it names no holder
    return Status::OK();
  }
  std::string text;
  DT_RETURN_IF_ERROR(store_->Get(kKey, &text).WithContext("reading " + store_->url() + "/" + kKey));
  const auto kv = ParseOwner(text);
  if (kv.count("token") == 0 || kv.at("token") != token_) {
    token_.clear();
    return Status::FailedPrecondition("another job took over checkpoint.url " + store_->url() + ": " +
                                      Describe(kv, WallSeconds()) + "; stopping so the two do not mix checkpoints");
  }
  return Write();
}

StoreOwner::~StoreOwner() {
  if (token_.empty()) return;
  std::string text;
  if (!store_->Get(kKey, &text).ok() || ParseOwner(text)["token"] != token_) return;  // no longer ours
  const Status st = store_->Delete(kKey);
  if (!st.ok()) DT_LOG_WARN(kRuntime, "releasing {}/{}: {}", store_->url(), kKey, st.ToString());
}

}  // namespace dtrain::runtime
