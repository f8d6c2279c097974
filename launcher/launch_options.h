#pragma once
// Command-line options of `dtrain launch [options] CONFIG [--set k=v ...]`.
//
// Parsing is pure (no environment, no files): values that depend on the machine — `gpu`/`auto`
// process counts, the hostfile's contents, the backend under `auto` — are resolved later by
// BuildLaunchCommand (launcher/launch_command.h). Every error is one line naming the flag; the
// caller prints it and exits with kExitUsage (2).

#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::launcher {

enum class Backend { kAuto, kMpirun, kSrun };

struct LaunchOptions {
  std::string nproc_per_node = "auto";  // N | gpu | cpu | auto, validated here, resolved later
  bool nproc_given = false;             // --nproc-per-node appeared on the command line
  int nnodes = 0;                       // 0: not given
  std::string hosts;                    // --hosts text ("a:8,b:8"), already validated
  std::string hostfile;                 // --hostfile path
  int max_restarts = 0;
  std::string log_dir;  // empty: no per-rank log files
  int grace_seconds = 10;
  bool dry_run = false;
  bool help = false;
  Backend backend = Backend::kAuto;
  std::vector<std::string> backend_args;  // --mpirun-arg values, in order (given to srun under srun)
  std::string config;                     // CONFIG
  std::vector<std::string> sets;          // --set values, each "key=value", in order
};

// Parses the arguments after `launch`. Accepts `--flag value` and `--flag=value`; options and
// `--set` may come before or after CONFIG. Exactly one CONFIG is required unless --help.
Status ParseLaunchArgs(const std::vector<std::string>& args, LaunchOptions* out);

// The --help text.
const char* LaunchUsage();

const char* BackendName(Backend backend);

}  // namespace dtrain::launcher
