#pragma once
// FaultStorage: a storage::Storage that wraps another one (file:// or s3://) and makes selected calls
// fail, hang or write partial data, for tests of failure handling (docs/faults.md). Storage::Open
// wraps every store it opens when the environment variable DTRAIN_STORAGE_FAULT is set:
//
//   DTRAIN_STORAGE_FAULT="op=put,key=*/manifest.pb,nth=1,action=partial,bytes=10"
//     op      put | get | head | list | delete | any (default any); get covers Get and GetRange
//     key     which keys: a glob when it holds * ? or [ (fnmatch, '*' also matches '/'), else a
//             substring; list calls match their prefix (default: every key)
//     nth     N: only the N-th matching call of this store (1-based); every: each one (default)
//     action  error    the call returns IoError naming the operation, the URL/key and the variable
//             hang     the call blocks `seconds` (then runs normally), or without `seconds` until
//                      Cancel() (then returns Aborted): a storage server that stops answering
//             partial  put: stores only the first `bytes` bytes and reports success — the worst
//                      case, a backend that lies; get: returns only the first `bytes` bytes
//     seconds hang only; > 0
//     bytes   partial only; >= 0
//
// A malformed value is an InvalidArgument naming the variable and the expected form, so a typo never
// silently disables a test's fault. Each opened store counts its own calls.
// Thread-safe: the call counter is atomic; hangs wait on a condition variable that Cancel() signals.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/storage.h"

namespace dtrain::storage {

// One parsed DTRAIN_STORAGE_FAULT value.
struct StorageFaultSpec {
  enum class Op { kAny, kPut, kGet, kHead, kList, kDelete };
  enum class Action { kError, kHang, kPartial };
  Op op = Op::kAny;
  std::string key;  // pattern; "" = every key
  int64_t nth = 0;  // 0 = every matching call
  Action action = Action::kError;
  double hang_s = 0;   // 0 = until Cancel()
  uint64_t bytes = 0;  // partial
  std::string text;    // the value as given, for messages

  // Parses `value` (non-empty).
  static Status Parse(const std::string& value, StorageFaultSpec* out);
  // Whether a call of `op` on `key` is selected by op and key (not by nth).
  bool Matches(Op call_op, const std::string& key) const;
  static const char* OpName(Op op);
};

class FaultStorage : public Storage {
 public:
  FaultStorage(std::unique_ptr<Storage> inner, StorageFaultSpec spec);

  // Wraps *store in a FaultStorage when $DTRAIN_STORAGE_FAULT is set (logging a warning that names
  // the store); InvalidArgument for a malformed value. Leaves *store alone when the variable is unset.
  static Status WrapFromEnv(std::unique_ptr<Storage>* store);

  Status Put(const std::string& key, const void* data, size_t size) override;
  Status Get(const std::string& key, std::string* out) override;
  Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) override;
  Status Head(const std::string& key, ObjectInfo* out) override;
  Status List(const std::string& prefix, std::vector<ObjectInfo>* out) override;
  Status Delete(const std::string& key) override;
  const std::string& url() const override { return inner_->url(); }

  // Ends every hang without `seconds`, now and later: those calls return Aborted.
  void Cancel();
  Storage& inner() { return *inner_; }

 private:
  using Op = StorageFaultSpec::Op;
  // Whether this call is the one to fault (counts matching calls).
  bool Selected(Op op, const std::string& key);
  // Runs the hang (OK: go on with the real call; Aborted when cancelled) or returns the error.
  Status Inject(Op op, const std::string& key);
  std::string What(Op op, const std::string& key) const;

  std::unique_ptr<Storage> inner_;
  const StorageFaultSpec spec_;
  std::atomic<int64_t> matched_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
};

}  // namespace dtrain::storage
