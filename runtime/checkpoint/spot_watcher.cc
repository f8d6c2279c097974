#include "runtime/checkpoint/spot_watcher.h"

#include <curl/curl.h>
#include <signal.h>

#include <chrono>

#include "core/logging.h"
#include "runtime/checkpoint/preemption.h"

namespace dtrain::runtime {
namespace {

constexpr size_t kMaxBody = 64 << 10;  // a notice is a few dozen bytes

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * n > kMaxBody) return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  body->append(data, size * n);
  return size * n;
}

}  // namespace

Status SpotWatcher::Create(const SpotWatcherOptions& opts, std::unique_ptr<SpotWatcher>* out) {
  if (opts.url.empty()) return Status::InvalidArgument("spot watcher: empty URL");
  if (!(opts.poll_s > 0)) return Status::InvalidArgument("spot watcher: poll interval must be > 0");
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  out->reset(new SpotWatcher(opts));  // private constructor: make_unique cannot reach it
  DT_LOG_INFO(kRuntime, "spot watcher: polling {} every {} s", opts.url, opts.poll_s);
  return Status::OK();
}

SpotWatcher::SpotWatcher(const SpotWatcherOptions& opts) : opts_(opts), thread_([this] { Loop(); }) {}

SpotWatcher::~SpotWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool SpotWatcher::noticed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return noticed_;
}

void SpotWatcher::Loop() {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    DT_LOG_WARN(kRuntime, "spot watcher: curl_easy_init failed; not watching {}", opts_.url);
    return;
  }
  const auto interval = std::chrono::duration<double>(opts_.poll_s);
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    std::string notice;
    const bool found = Poll(curl, &notice);
    lock.lock();
    if (found) {
      noticed_ = true;
      DT_LOG_WARN(kRuntime, "spot termination notice from {}: {}; checkpointing and exiting", opts_.url, notice);
      Preemption::Raise(SIGTERM);
      break;
    }
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    cv_.wait_until(lock, next, [this] { return stop_; });
  }
  lock.unlock();
  curl_easy_cleanup(curl);
}

bool SpotWatcher::Poll(void* handle, std::string* notice) {
  CURL* curl = static_cast<CURL*>(handle);
  std::string body;
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, opts_.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, opts_.timeout_ms);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");  // metadata endpoints are link-local
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    DT_LOG_DEBUG(kRuntime, "spot watcher: {}: {}", opts_.url, curl_easy_strerror(rc));
    return false;
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200 || body.empty()) {
    DT_LOG_DEBUG(kRuntime, "spot watcher: {}: HTTP {}, no notice", opts_.url, status);
    return false;
  }
  *notice = std::move(body);
  return true;
}

}  // namespace dtrain::runtime
