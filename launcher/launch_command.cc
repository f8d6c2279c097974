#include "launcher/launch_command.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "core/check.h"
#include "core/device_context.h"
#include "core/logging.h"

extern char** environ;

namespace dtrain::launcher {
namespace {

constexpr int kCpuRanksPerNode = 2;
constexpr const char* kDefaultMasterPort = "29500";

const std::string* FindVar(const LaunchEnv& env, const std::string& name) {
  for (const auto& kv : env.vars) {
    if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

}  // namespace

// --nproc-per-node -> a count; `slots_override` tells whether it replaces the hosts' slots.
Status ResolveNproc(const LaunchOptions& opts, const LaunchEnv& env, int* nproc, bool* slots_override) {
  const std::string& spec = opts.nproc_per_node;
  *slots_override = opts.nproc_given && spec != "auto" && spec != "cpu";
  if (spec == "gpu") {
    if (env.gpu_count == 0) {
      return Status::InvalidArgument(
          "--nproc-per-node gpu: no visible GPU (check CUDA_VISIBLE_DEVICES, `dtrain doctor`)");
    }
    *nproc = env.gpu_count;
  } else if (spec == "cpu") {
    *nproc = kCpuRanksPerNode;
  } else if (spec == "auto") {
    *nproc = env.gpu_count > 0 ? env.gpu_count : kCpuRanksPerNode;
  } else if (!ParsePositiveInt(spec, nproc)) {
    return Status::InvalidArgument("--nproc-per-node: expected a positive integer or gpu|cpu|auto, got '" + spec + "'");
  }
  return Status::OK();
}

namespace {

Status ResolveHosts(const LaunchOptions& opts, int nproc, bool slots_override, std::vector<HostSlots>* hosts) {
  if (!opts.hosts.empty()) {
    DT_RETURN_IF_ERROR(ParseHostList(opts.hosts, hosts));
  } else if (!opts.hostfile.empty()) {
    DT_RETURN_IF_ERROR(ParseHostfile(opts.hostfile, hosts));
  } else {
    if (opts.nnodes > 1) {
      return Status::InvalidArgument("--nnodes " + std::to_string(opts.nnodes) +
                                     ": more than one node needs --hosts or --hostfile (or a Slurm allocation)");
    }
    *hosts = {HostSlots{"localhost", nproc}};
  }
  if (opts.nnodes > static_cast<int>(hosts->size())) {
    return Status::InvalidArgument("--nnodes " + std::to_string(opts.nnodes) + ": only " +
                                   std::to_string(hosts->size()) + " host(s) given");
  }
  if (opts.nnodes > 0) hosts->resize(opts.nnodes);
  for (auto& h : *hosts) {
    if (slots_override || h.slots == 0) h.slots = nproc;
  }
  return Status::OK();
}

bool ShellSafe(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string("_-./:=,@%+").find(c) != std::string::npos;
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string ShellQuote(const std::string& s) {
  if (ShellSafe(s)) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Status ProbeLaunchEnv(LaunchEnv* out) {
  *out = LaunchEnv();
  out->gpu_count = CudaDeviceCount();
  cpu_set_t cpus;
  out->cpu_count = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  if (out->cpu_count <= 0) out->cpu_count = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  out->is_root = geteuid() == 0;
  out->hostname = log::Hostname();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) out->vars.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  const std::string* job = FindVar(*out, "SLURM_JOB_ID");
  out->in_slurm = job != nullptr && !job->empty();
  char buf[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return Status::Internal("dtrain launch: cannot resolve /proc/self/exe");
  out->self_bin.assign(buf, n);
  const std::string* bin = FindVar(*out, "DTRAIN_WORKER_BIN");
  out->worker_bin = bin != nullptr && !bin->empty() ? *bin : out->self_bin;
  return Status::OK();
}

int Placement::world_size() const {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

std::string Placement::HostOfRank(int rank) const {
  int first = 0;
  for (const auto& h : hosts) {
    if (rank >= first && rank < first + h.slots) return h.name;
    first += h.slots;
  }
  return "";
}

namespace {

// The per-node form (see the header): only this node's workers, no process manager.
Status BuildNodeCommand(const LaunchOptions& opts, const LaunchEnv& env, int nproc, LaunchCommand* out) {
  out->backend = Backend::kNode;
  out->node_rank = opts.node_rank;
  out->local_nproc = nproc;
  out->first_rank = opts.node_rank * nproc;
  for (int n = 0; n < opts.nnodes; ++n) {
    out->placement.hosts.push_back({n == opts.node_rank ? env.hostname : "node-" + std::to_string(n), nproc});
  }
  const std::string* port = FindVar(env, "MASTER_PORT");
  std::string master_port = opts.master_port > 0                ? std::to_string(opts.master_port)
                            : port != nullptr && !port->empty() ? *port
                                                                : kDefaultMasterPort;
  int port_number = 0;
  if (!ParsePositiveInt(master_port, &port_number) || port_number > 65534) {
    return Status::InvalidArgument("MASTER_PORT=" + master_port +
                                   ": expected a port 1..65534 (node 0's launcher listens on MASTER_PORT+1)");
  }
  out->env_set = {{"MASTER_ADDR", opts.master_addr.empty() ? std::string("127.0.0.1") : opts.master_addr},
                  {"MASTER_PORT", master_port},
                  {"WORLD_SIZE", std::to_string(opts.nnodes * nproc)},
                  {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
                  {"NODE_RANK", std::to_string(opts.node_rank)}};
  return Status::OK();
}

// `WORKER train CONFIG [--set ...]`.
void AppendWorkerArgs(const LaunchOptions& opts, const LaunchEnv& env, int restart_count,
                      std::vector<std::string>* argv) {
  argv->insert(argv->end(), {env.worker_bin, "train", opts.config});
  for (const auto& kv : opts.sets) argv->insert(argv->end(), {"--set", kv});
  // A restart continues this job's own run: from its newest checkpoint, and without starting over again (the first
  // attempt's --resume never / --overwrite / a step number applied to the run's start, not to its restarts).
  if (restart_count > 0) {
    argv->insert(argv->end(), {"--set", "checkpoint.resume=auto", "--set", "checkpoint.overwrite=false"});
  }
}

}  // namespace

Status BuildLaunchCommand(const LaunchOptions& opts, const LaunchEnv& env, int restart_count, LaunchCommand* out) {
  *out = LaunchCommand();
  if (opts.node_rank >= 0) {
    int nproc = 0;
    bool slots_override = false;
    DT_RETURN_IF_ERROR(ResolveNproc(opts, env, &nproc, &slots_override));
    DT_RETURN_IF_ERROR(BuildNodeCommand(opts, env, nproc, out));
    out->env_set.emplace_back("DTRAIN_RESTART_COUNT", std::to_string(restart_count));
    AppendWorkerArgs(opts, env, restart_count, &out->argv);
    return Status::OK();
  }
  const bool has_hosts = !opts.hosts.empty() || !opts.hostfile.empty();
  out->backend = opts.backend;
  if (out->backend == Backend::kAuto) out->backend = env.in_slurm && !has_hosts ? Backend::kSrun : Backend::kMpirun;
  if (out->backend == Backend::kSrun && has_hosts) {
    return Status::InvalidArgument(
        "--backend srun: --hosts/--hostfile are for mpirun; under Slurm the allocation "
        "decides the nodes (use --nnodes / --nproc-per-node)");
  }
  int nproc = 0;
  bool slots_override = false;
  DT_RETURN_IF_ERROR(ResolveNproc(opts, env, &nproc, &slots_override));

  std::string master_addr = env.hostname;
  std::string host_arg;  // mpirun --host value, names as given
  if (out->backend == Backend::kMpirun) {
    DT_RETURN_IF_ERROR(ResolveHosts(opts, nproc, slots_override, &out->placement.hosts));
    master_addr = out->placement.hosts.front().name;
    for (auto& h : out->placement.hosts) {
      host_arg += (host_arg.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
      if (h.name == "localhost") h.name = env.hostname;  // as mpirun reports it
    }
  }
  const std::string* addr = FindVar(env, "MASTER_ADDR");
  const std::string* port = FindVar(env, "MASTER_PORT");
  out->env_set = {{"MASTER_ADDR", addr != nullptr && !addr->empty() ? *addr : master_addr},
                  {"MASTER_PORT", port != nullptr && !port->empty() ? *port : kDefaultMasterPort},
                  {"DTRAIN_RESTART_COUNT", std::to_string(restart_count)}};

  auto& argv = out->argv;
  if (out->backend == Backend::kSrun) {
    argv = {"srun", "--mpi=pmix", "--label", "--unbuffered", "--kill-on-bad-exit=1"};
    if (opts.nnodes > 0) argv.push_back("--nodes=" + std::to_string(opts.nnodes));
    std::string nodelist;
    for (const std::string& n : opts.srun_nodelist) {
      nodelist += (nodelist.empty() ? "" : ",") + n;
      if (opts.nproc_given) out->placement.hosts.push_back({n, nproc});  // srun's block distribution: in this order
    }
    if (!nodelist.empty()) argv.push_back("--nodelist=" + nodelist);
    if (opts.nproc_given) {
      // srun ignores --ntasks-per-node (with a warning) when it disagrees with the allocation's task
      // count, e.g. --nproc-per-node 2 in `sbatch -n4`: the total must be given too.
      int nodes = opts.nnodes;
      const std::string* alloc_nodes = FindVar(env, "SLURM_JOB_NUM_NODES");
      if (nodes == 0 && alloc_nodes != nullptr && !ParsePositiveInt(*alloc_nodes, &nodes)) nodes = 0;
      argv.push_back("--ntasks-per-node=" + std::to_string(nproc));
      if (nodes > 0) argv.push_back("--ntasks=" + std::to_string(nodes * nproc));
    }
  } else {
    argv = {"mpirun", "-np", std::to_string(out->placement.world_size())};
    argv.insert(argv.end(), {"--host", host_arg, "--map-by", "slot", "--bind-to", "none", "--tag-output"});
    std::vector<std::string> exported;
    for (const auto& kv : out->env_set) exported.push_back(kv.first);
    std::vector<std::string> passthrough;
    for (const auto& kv : env.vars) {
      const bool wanted = kv.first.rfind("NCCL_", 0) == 0 || kv.first.rfind("DTRAIN_", 0) == 0;
      if (wanted && std::find(exported.begin(), exported.end(), kv.first) == exported.end()) {
        passthrough.push_back(kv.first);
      }
    }
    std::sort(passthrough.begin(), passthrough.end());
    exported.insert(exported.end(), passthrough.begin(), passthrough.end());
    for (const auto& name : exported) {
      argv.push_back("-x");
      argv.push_back(name);
    }
    // Remote hosts go through ssh: never prompt (a prompt would hang the launch) and give up on an
    // unreachable host after 10 s, unless the user chose their own agent or ssh arguments.
    const bool remote = std::any_of(out->placement.hosts.begin(), out->placement.hosts.end(),
                                    [&](const auto& h) { return h.name != env.hostname; });
    const auto user_sets = [&](const std::string& key) {
      return std::find(opts.backend_args.begin(), opts.backend_args.end(), key) != opts.backend_args.end() ||
             FindVar(env, "OMPI_MCA_" + key) != nullptr;
    };
    if (remote && !user_sets("plm_rsh_agent")) {
      for (const auto& h : out->placement.hosts) {
        if (h.name != env.hostname) out->ssh_hosts.push_back(h.name);
      }
      if (!user_sets("plm_rsh_args")) {
        argv.insert(argv.end(), {"--mca", "plm_rsh_args", "-o BatchMode=yes -o ConnectTimeout=10"});
      }
    }
    if (env.is_root) {
      for (const char* name : {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}) {
        if (FindVar(env, name) == nullptr) out->env_set.emplace_back(name, "1");
      }
    }
  }
  argv.insert(argv.end(), opts.backend_args.begin(), opts.backend_args.end());
  if (out->backend == Backend::kMpirun) argv.insert(argv.end(), {env.self_bin, "rank-exec"});
  AppendWorkerArgs(opts, env, restart_count, &argv);
  return Status::OK();
}

int LocalRanks(const LaunchOptions& opts, const LaunchCommand& cmd) {
  if (cmd.backend == Backend::kNode) return cmd.local_nproc;
  if (cmd.backend == Backend::kMpirun && opts.hosts.empty() && opts.hostfile.empty()) return cmd.placement.world_size();
  return 0;
}

std::string FormatCommandLine(const LaunchCommand& cmd) {
  std::string line;
  if (cmd.backend == Backend::kNode) {  // one line per node; the per-worker variables as a range
    line = "RANK=" + std::to_string(cmd.first_rank) + ".." + std::to_string(cmd.first_rank + cmd.local_nproc - 1) +
           " LOCAL_RANK=0.." + std::to_string(cmd.local_nproc - 1) + " ";
  }
  for (const auto& kv : cmd.env_set) line += kv.first + "=" + ShellQuote(kv.second) + " ";
  for (size_t i = 0; i < cmd.argv.size(); ++i) line += (i ? " " : "") + ShellQuote(cmd.argv[i]);
  return line;
}

}  // namespace dtrain::launcher
