#include "runtime/checkpoint/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "runtime/checkpoint/preemption.h"

namespace dtrain::runtime {
namespace {

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtoll(s.c_str(), &end, 10);
  return *end == '\0' && *out >= 0;
}

}  // namespace

Status FaultInjector::Parse(const std::string& spec, FaultInjector* out) {
  *out = FaultInjector();
  if (spec.empty()) return Status::OK();
  FaultInjector f;
  f.spec_ = spec;
  std::stringstream ss(spec);
  std::string item;
  const Status bad =
      Status::InvalidArgument("DTRAIN_FAULT='" + spec +
                              "': expected rank=R,step=S,[attempt=A,]action=error|kill|hang|pause|kill_in_ckpt"
                              "[,seconds=N (pause)][,phase=snapshot|data|before_manifest|manifest|latest|retention "
                              "(kill_in_ckpt)]");
  bool have_phase = false, have_seconds = false;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) return bad;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    int64_t n = 0;
    if (key == "rank" && ParseInt(value, &n)) {
      f.rank_ = static_cast<int>(n);
    } else if (key == "step" && ParseInt(value, &n)) {
      f.step_ = n;
    } else if (key == "attempt" && ParseInt(value, &n)) {
      f.attempt_ = n;
    } else if (key == "action" && (value == "error" || value == "kill" || value == "hang" || value == "pause" ||
                                   value == "kill_in_ckpt")) {
      f.action_ = value;
    } else if (key == "seconds" && ParseInt(value, &n)) {  // ParseInt refuses negatives
      f.pause_s_ = n;
      have_seconds = true;
    } else if (key == "phase" && ParseCheckpointPhase(value, &f.phase_)) {
      have_phase = true;
    } else {
      return bad;
    }
  }
  if (f.action_.empty() || (have_phase && f.action_ != "kill_in_ckpt") || (have_seconds && f.action_ != "pause")) {
    return bad;
  }
  *out = f;
  return Status::OK();
}

Status FaultInjector::FromEnv(int64_t attempt, FaultInjector* out) {
  const char* env = std::getenv("DTRAIN_FAULT");
  DT_RETURN_IF_ERROR(Parse(env != nullptr ? env : "", out));
  if (out->attempt_ >= 0 && out->attempt_ != attempt) *out = FaultInjector();
  return Status::OK();
}

Status FaultInjector::AtCheckpointWrite(int rank, int64_t step, CheckpointPhase phase) const {
  if (action_ != "kill_in_ckpt" || step != step_ || phase != phase_ || (rank_ >= 0 && rank != rank_)) {
    return Status::OK();
  }
  DT_LOG_WARN(kRuntime, "DTRAIN_FAULT={}: killing the worker while it writes checkpoint step {} (phase {})", spec_,
              step, CheckpointPhaseName(phase));
  log::Flush();
  ::kill(::getpid(), SIGKILL);
  return Status::OK();
}

Status FaultInjector::AtStep(int rank, int64_t step) const {
  if (action_.empty() || action_ == "kill_in_ckpt" || step != step_ || (rank_ >= 0 && rank != rank_))
    return Status::OK();
  DT_LOG_WARN(kRuntime, "DTRAIN_FAULT={}: injecting '{}' at step {}", spec_, action_, step);
  if (action_ == "kill") {
    log::Flush();  // flush what was logged so far; the kill itself leaves no trace
    ::kill(::getpid(), SIGKILL);
  }
  if (action_ == "hang") {
    for (;;) ::pause();
  }
  if (action_ == "pause") {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(pause_s_);
    while (Preemption::Requested() == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::OK();
  }
  return Status::Internal("injected fault (DTRAIN_FAULT=" + spec_ + ") at step " + std::to_string(step));
}

}  // namespace dtrain::runtime
