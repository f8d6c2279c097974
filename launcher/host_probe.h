#pragma once
// Pre-flight check of the hosts mpirun will reach with ssh: each must resolve and answer with an
// ssh banner on the ssh port within a few seconds. Turns "unknown host" and "unreachable host"
// into one clear error before mpirun runs (whose own reports for these cases vary by version and
// can be misleading, e.g. "not enough slots").

#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::launcher {

// Probes every host in parallel. Unavailable naming the first host that failed and why.
Status ProbeSshHosts(const std::vector<std::string>& hosts, int port = 22, double timeout_s = 5.0);

}  // namespace dtrain::launcher
