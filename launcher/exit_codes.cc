#include "launcher/exit_codes.h"

namespace dtrain::launcher {

int ExitCodeFor(const Status& st) {
  switch (st.code()) {
    case Status::Code::kOk:
      return kExitOk;
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kDataLoss:
      return kExitUsage;  // bad input: a restart would not fix it
    case Status::Code::kPreempted:
      return kExitPreempted;
    default:
      return kExitFailure;
  }
}

}  // namespace dtrain::launcher
