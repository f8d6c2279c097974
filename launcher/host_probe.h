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

// The elastic launcher's reachability probe: true when `host` answers a TCP connection to `port` within the
// timeout, whether it accepts or refuses it (a refusal comes from the host's own kernel: the host is up and
// reachable); false when it cannot be resolved, the network says unreachable, or nothing comes back.
bool HostAnswers(const std::string& host, int port = 22, double timeout_s = 2.0);

}  // namespace dtrain::launcher
