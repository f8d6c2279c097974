#pragma once
// dtrain::Status — the one error model of dtrain.
//
// Every fallible call in core/, comm/, data/, models/ and runtime/ returns a [[nodiscard]] Status.
// No exception crosses a library boundary and library code never calls exit(); only
// launcher/exit_codes.h (ExitCodeFor) maps a Status to a process exit code, for every command.
// Status is a value type: cheap to copy when OK (no allocation), thread-compatible.

#include <string>
#include <utility>

namespace dtrain {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kInvalidArgument,  // bad config, flag, shape, or user input
    kNotFound,         // a file, key or object that should exist does not
    kIoError,          // read/write/network failure
    kDataLoss,         // truncated or corrupt file, checksum mismatch
    kFailedPrecondition,
    kUnavailable,  // device or peer not available (no GPU, rank gone)
    kInternal,     // a library (CUDA, cuBLAS, cuDNN, NCCL, MPI) reported an error
    kAborted,      // a collective or job was aborted
    kUnimplemented,
    kPreempted,  // a preemption signal was handled; a checkpoint was saved
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status DataLoss(std::string msg) { return Status(Code::kDataLoss, std::move(msg)); }
  static Status FailedPrecondition(std::string msg) { return Status(Code::kFailedPrecondition, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  static Status Aborted(std::string msg) { return Status(Code::kAborted, std::move(msg)); }
  static Status Unimplemented(std::string msg) { return Status(Code::kUnimplemented, std::move(msg)); }
  static Status Preempted(std::string msg) { return Status(Code::kPreempted, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }

  // "InvalidArgument: configs/fashion_mnist_mlp.yaml: key 'optim.lr': expected a number, got 'abc'".
  std::string ToString() const;

  // Returns a copy with `context + ": "` prepended to the message (used to add file/rank names).
  Status WithContext(const std::string& context) const;

 private:
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

const char* CodeName(Status::Code code);

}  // namespace dtrain
