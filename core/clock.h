#pragma once
// The one clock helper: every "now" in dtrain is one of these two (leveldb's Env::NowMicros in the same spirit).
//   WallSeconds()      Unix time in seconds (system clock): what records, manifests, owner objects and logs carry.
//                      It may jump (NTP, a user setting the date): never use it to measure a duration.
//   MonotonicSeconds() seconds on the steady clock since an arbitrary origin: for durations, deadlines and rates.
// Both are thread-safe and read only the OS clock.

#include <chrono>

namespace dtrain {

inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace dtrain
