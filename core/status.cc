#include "core/status.h"

namespace dtrain {

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kIoError:
      return "IoError";
    case Status::Code::kDataLoss:
      return "DataLoss";
    case Status::Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kAborted:
      return "Aborted";
    case Status::Code::kUnimplemented:
      return "Unimplemented";
    case Status::Code::kPreempted:
      return "Preempted";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + msg_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + msg_);
}

}  // namespace dtrain
