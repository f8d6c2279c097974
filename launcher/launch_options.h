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

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

// kNode: per-node start (--node-rank), this launcher starts its node's workers itself; not a --backend choice.
enum class Backend { kAuto, kMpirun, kSrun, kNode };

struct LaunchOptions {
  std::string nproc_per_node = "auto";  // N | gpu | cpu | auto, validated here, resolved later
  bool nproc_given = false;             // --nproc-per-node appeared on the command line
  int nnodes = 0;                       // 0: not given (or elastic)
  int elastic_min = 0;                  // --nnodes MIN:MAX: an elastic host set (0: not elastic)
  int elastic_max = 0;
  std::string elastic_batch = "global";  // --elastic-batch global|per-gpu (launcher/elastic_plan.h)
  int rejoin_after = 30;                 // --rejoin-after S: a lost host may rejoin S s after it was dropped
  int wait_for_hosts = 0;                // --wait-for-hosts S: below MIN, wait S s for hosts to return (0: stop)
  int node_rank = -1;                    // --node-rank: per-node start (no process manager); -1: not given
  std::string master_addr;               // --master-addr (per-node start: node 0's host)
  int master_port = 0;                   // --master-port; 0: not given (MASTER_PORT, else 29500)
  std::string secret_file;               // --secret-file: the job secret (comm/job_secret.h); empty: not given
  std::string hosts;                     // --hosts text ("a:8,b:8"), already validated
  std::string hostfile;                  // --hostfile path
  int max_restarts = 0;
  bool oversubscribe = false;  // --oversubscribe: more ranks on this machine than its slots (cores, or GPUs)
  std::string log_dir;         // empty: no per-rank log files
  int grace_seconds = 10;
  bool dry_run = false;
  bool help = false;
  Backend backend = Backend::kAuto;
  std::vector<std::string> backend_args;  // --mpirun-arg values, in order (given to srun under srun)
  std::string config;                     // CONFIG
  std::vector<std::string> sets;          // --set values, each "key=value", in order
  // Not a flag: the nodes of the allocation an srun step runs on (srun --nodelist; with nnodes and an explicit
  // per-node count also the placement), set by the elastic launcher under Slurm (launcher/slurm_elastic.h).
  std::vector<std::string> srun_nodelist;
};

// Registers `launch` and its flags on `parent` (launcher/cli_parse.h); parsing fills *out, which must
// outlive `parent`. Accepts `--flag value` and `--flag=value`; options and `--set`/`--resume` may come
// before or after CONFIG and keep their order. torchrun's spellings --nproc_per_node and
// --max_restarts are aliases; torchrun's flags that mean nothing here (--standalone, --rdzv-*) and its
// `--resume latest` are refused with the dtrain way to say it. Exactly one CONFIG is required unless --help.
CLI::App* AddLaunchCommand(CLI::App* parent, LaunchOptions* out);

// Parses the arguments after `launch` (AddLaunchCommand on a root of its own). On --help, out->help
// is set and *help_text (if not null) holds the help.
Status ParseLaunchArgs(const std::vector<std::string>& args, LaunchOptions* out, std::string* help_text = nullptr);

const char* BackendName(Backend backend);

// torchrun writes a fixed node count as a range (--nnodes 2:2): the hint that follows an elastic-range error, "" unless
// min_nodes == max_nodes.
std::string FixedNodesHint(int min_nodes, int max_nodes);

}  // namespace dtrain::launcher
