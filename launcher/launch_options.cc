#include "launcher/launch_options.h"

#include "core/check.h"
#include "launcher/hostfile.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kUsage =
    "usage: dtrain launch [options] CONFIG [--set key=value ...]\n"
    "\n"
    "Starts one `dtrain train CONFIG` worker per GPU (or CPU rank) on every node through mpirun\n"
    "(or srun inside a Slurm allocation), supervises them, names the rank that failed first and\n"
    "exits with its code (0 done, 2 usage error, 75 preempted: requeue, 128+S killed by signal S).\n"
    "\n"
    "options:\n"
    "  --nproc-per-node N|gpu|cpu|auto  workers per node: gpu = visible GPUs, cpu = 2,\n"
    "                                   auto = visible GPUs if any, else 2 (default auto;\n"
    "                                   with hosts and no explicit N/gpu: each host's slots)\n"
    "  --nnodes N                       nodes to use (the first N hosts; under Slurm: srun --nodes)\n"
    "  --hosts a:8,b:8                  hosts and their process counts\n"
    "  --hostfile F                     Open MPI / DeepSpeed hostfile: `host slots=N` per line\n"
    "  --max-restarts K                 restart the whole job up to K times after a failure,\n"
    "                                   with DTRAIN_RESTART_COUNT=1..K (default 0; never on 2 or 75)\n"
    "  --log-dir D                      write each rank's complete output to D/rank-N.log\n"
    "  --grace-seconds S                after a failure or a signal, wait S seconds before\n"
    "                                   SIGTERM, then S more before SIGKILL (default 10)\n"
    "  --backend auto|mpirun|srun       process manager (auto: srun when SLURM_JOB_ID is set and no\n"
    "                                   hosts are given, else mpirun)\n"
    "  --mpirun-arg X                   pass X to mpirun (or srun); repeatable\n"
    "  --resume auto|never|STEP         where workers resume from (= --set checkpoint.resume=...;\n"
    "                                   default auto: the newest valid checkpoint)\n"
    "  --dry-run                        print the command that would run and exit\n"
    "  --help                           this text\n"
    "\n"
    "Console: rank 0's output plus WARN/ERROR lines of every rank. SIGUSR1 and SIGTERM reach every\n"
    "rank (checkpoint and exit 75; SIGTERM stops the job after the grace period); SIGINT stops it.\n";

bool ParseNonNegativeInt(const std::string& text, int* out) {
  if (text == "0") {
    *out = 0;
    return true;
  }
  return ParsePositiveInt(text, out);
}

Status BadValue(const std::string& flag, const std::string& value, const std::string& expected) {
  return Status::InvalidArgument(flag + ": expected " + expected + ", got '" + value + "'");
}

}  // namespace

const char* LaunchUsage() { return kUsage; }

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kMpirun:
      return "mpirun";
    case Backend::kSrun:
      return "srun";
  }
  return "?";
}

Status ParseLaunchArgs(const std::vector<std::string>& args, LaunchOptions* out) {
  *out = LaunchOptions();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_inline_value = false;
    if (flag.rfind("--", 0) == 0) {
      const auto eq = flag.find('=');
      if (eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        has_inline_value = true;
      }
    } else {
      if (!out->config.empty()) {
        return Status::InvalidArgument("unexpected argument '" + flag + "' (CONFIG is already '" + out->config +
                                       "'; overrides go as --set key=value)");
      }
      out->config = flag;
      continue;
    }
    // Flags without a value.
    if (flag == "--help" || flag == "--dry-run") {
      if (has_inline_value) return Status::InvalidArgument(flag + ": takes no value");
      (flag == "--help" ? out->help : out->dry_run) = true;
      continue;
    }
    static const char* const kValued[] = {"--nproc-per-node", "--nnodes",  "--hosts",         "--hostfile",
                                          "--max-restarts",   "--log-dir", "--grace-seconds", "--backend",
                                          "--mpirun-arg",     "--set",     "--resume"};
    bool known = false;
    for (const char* k : kValued) known = known || flag == k;
    if (!known) return Status::InvalidArgument("unknown flag '" + flag + "' (see `dtrain launch --help`)");
    if (!has_inline_value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(flag + ": missing value");
      value = args[++i];
    }
    if (flag == "--nproc-per-node") {
      int n = 0;
      if (value != "gpu" && value != "cpu" && value != "auto" && !ParsePositiveInt(value, &n)) {
        return BadValue(flag, value, "a positive integer or gpu|cpu|auto");
      }
      out->nproc_per_node = value;
      out->nproc_given = true;
    } else if (flag == "--nnodes") {
      if (!ParsePositiveInt(value, &out->nnodes)) return BadValue(flag, value, "a positive integer");
    } else if (flag == "--hosts") {
      std::vector<HostSlots> hosts;
      DT_RETURN_IF_ERROR(ParseHostList(value, &hosts));
      out->hosts = value;
    } else if (flag == "--hostfile") {
      if (value.empty()) return Status::InvalidArgument("--hostfile: empty path");
      out->hostfile = value;
    } else if (flag == "--max-restarts") {
      if (!ParseNonNegativeInt(value, &out->max_restarts)) return BadValue(flag, value, "a non-negative integer");
    } else if (flag == "--log-dir") {
      if (value.empty()) return Status::InvalidArgument("--log-dir: empty path");
      out->log_dir = value;
    } else if (flag == "--grace-seconds") {
      if (!ParseNonNegativeInt(value, &out->grace_seconds)) return BadValue(flag, value, "a non-negative integer");
    } else if (flag == "--backend") {
      if (value == "auto")
        out->backend = Backend::kAuto;
      else if (value == "mpirun")
        out->backend = Backend::kMpirun;
      else if (value == "srun")
        out->backend = Backend::kSrun;
      else
        return BadValue(flag, value, "auto|mpirun|srun");
    } else if (flag == "--mpirun-arg") {
      out->backend_args.push_back(value);
    } else if (flag == "--resume") {  // shorthand for --set checkpoint.resume=VALUE (auto|never|STEP)
      if (value.empty()) return BadValue(flag, value, "auto|never|a step number");
      out->sets.push_back("checkpoint.resume=" + value);
    } else {  // --set
      const auto eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return BadValue(flag, value, "key=value");
      out->sets.push_back(value);
    }
  }
  if (out->help) return Status::OK();
  if (out->config.empty()) return Status::InvalidArgument("missing CONFIG (usage: dtrain launch [options] CONFIG)");
  if (!out->hosts.empty() && !out->hostfile.empty()) {
    return Status::InvalidArgument("--hosts and --hostfile: give one of them, not both");
  }
  return Status::OK();
}

}  // namespace dtrain::launcher
