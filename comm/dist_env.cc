#include "comm/dist_env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "core/check.h"

extern char** environ;

namespace dtrain::comm {
namespace {

using Env = std::map<std::string, std::string>;

bool Has(const Env& env, const char* name) { return env.count(name) > 0; }

// Strict decimal int: the whole value must parse ("12", "-3"); "12a", "", " 1" are errors.
Status ParseInt(const Env& env, const char* name, int* out) {
  const std::string& v = env.at(name);
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || v[0] == ' ' || errno == ERANGE || x < INT_MIN || x > INT_MAX) {
    return Status::InvalidArgument(std::string(name) + "='" + v + "' is not an integer");
  }
  *out = static_cast<int>(x);
  return Status::OK();
}

// Like ParseInt, but an absent variable leaves *out unchanged.
Status ParseOptionalInt(const Env& env, const char* name, int* out) {
  return Has(env, name) ? ParseInt(env, name, out) : Status::OK();
}

Status Require(const Env& env, const char* name, const char* because) {
  if (!Has(env, name))
    return Status::InvalidArgument(std::string(name) + " is not set (required when " + because + ")");
  return Status::OK();
}

Status CheckRange(const char* name, int value, int lo, int hi_exclusive, const char* hi_name) {
  if (value < lo || value >= hi_exclusive) {
    return Status::InvalidArgument(std::string(name) + "=" + std::to_string(value) + " is out of range [" +
                                   std::to_string(lo) + ", " + hi_name + "=" + std::to_string(hi_exclusive) + ")");
  }
  return Status::OK();
}

// Slurm's compressed task counts: "4(x2),3" -> {4, 4, 3}.
Status ParseTasksPerNode(const char* name, const std::string& v, std::vector<int>* out) {
  const Status bad = Status::InvalidArgument(std::string(name) + "='" + v + "' is not a Slurm task list like 4(x2),3");
  size_t pos = 0;
  while (pos < v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = v.substr(pos, comma - pos);
    char* end = nullptr;
    const long count = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == item.c_str() || count <= 0) return bad;
    long repeat = 1;
    if (*end == '(') {
      if (end[1] != 'x') return bad;
      char* rend = nullptr;
      repeat = std::strtol(end + 2, &rend, 10);
      if (rend == end + 2 || repeat <= 0 || rend[0] != ')' || rend[1] != '\0') return bad;
    } else if (*end != '\0') {
      return bad;
    }
    out->insert(out->end(), static_cast<size_t>(repeat), static_cast<int>(count));
    pos = comma + 1;
  }
  if (out->empty()) return bad;
  return Status::OK();
}

Status FromTorchrun(const Env& env, DistEnv* d) {
  DT_RETURN_IF_ERROR(Require(env, "RANK", "WORLD_SIZE is set"));
  DT_RETURN_IF_ERROR(Require(env, "WORLD_SIZE", "RANK is set"));
  DT_RETURN_IF_ERROR(ParseInt(env, "RANK", &d->rank));
  DT_RETURN_IF_ERROR(ParseInt(env, "WORLD_SIZE", &d->world_size));
  d->local_rank = d->rank;
  d->local_world_size = d->world_size;
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "LOCAL_RANK", &d->local_rank));
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "LOCAL_WORLD_SIZE", &d->local_world_size));
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "NODE_RANK", &d->node_rank));
  d->source = "torchrun";
  return Status::OK();
}

Status FromOmpi(const Env& env, DistEnv* d) {
  DT_RETURN_IF_ERROR(Require(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set"));
  DT_RETURN_IF_ERROR(ParseInt(env, "OMPI_COMM_WORLD_RANK", &d->rank));
  DT_RETURN_IF_ERROR(ParseInt(env, "OMPI_COMM_WORLD_SIZE", &d->world_size));
  d->local_rank = d->rank;
  d->local_world_size = d->world_size;
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "OMPI_COMM_WORLD_LOCAL_RANK", &d->local_rank));
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "OMPI_COMM_WORLD_LOCAL_SIZE", &d->local_world_size));
  if (Has(env, "NODE_RANK")) {
    DT_RETURN_IF_ERROR(ParseInt(env, "NODE_RANK", &d->node_rank));
  } else if (d->local_world_size > 0) {
    d->node_rank = d->rank / d->local_world_size;
  }
  d->source = "ompi";
  return Status::OK();
}

// The batch script of a job (sbatch) has SLURM_JOB_ID, SLURM_PROCID and SLURM_NTASKS of the whole
// allocation, but no SLURM_STEP_ID: it is not one of the tasks.
bool IsSlurmBatchShell(const Env& env) { return Has(env, "SLURM_JOB_ID") && !Has(env, "SLURM_STEP_ID"); }

Status FromSlurm(const Env& env, DistEnv* d) {
  DT_RETURN_IF_ERROR(Require(env, "SLURM_NTASKS", "SLURM_PROCID is set"));
  if (IsSlurmBatchShell(env)) {
    int ntasks = 1;
    DT_RETURN_IF_ERROR(ParseInt(env, "SLURM_NTASKS", &ntasks));
    if (ntasks > 1) {
      return Status::InvalidArgument(
          "this process is the batch script of Slurm job " + env.at("SLURM_JOB_ID") +
          " (SLURM_NTASKS=" + env.at("SLURM_NTASKS") +
          ", no SLURM_STEP_ID), not one of its tasks: start the workers with `srun --mpi=pmix dtrain train` or "
          "`dtrain launch` (examples/slurm/train.sbatch)");
    }
    return Status::OK();  // a one-task job's script: "single"
  }
  DT_RETURN_IF_ERROR(ParseInt(env, "SLURM_PROCID", &d->rank));
  DT_RETURN_IF_ERROR(ParseInt(env, "SLURM_NTASKS", &d->world_size));
  d->local_rank = d->rank;
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "SLURM_LOCALID", &d->local_rank));
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "SLURM_NODEID", &d->node_rank));
  const char* list_var = Has(env, "SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                         : Has(env, "SLURM_TASKS_PER_NODE")    ? "SLURM_TASKS_PER_NODE"
                                                               : nullptr;
  if (list_var != nullptr) {
    std::vector<int> per_node;
    DT_RETURN_IF_ERROR(ParseTasksPerNode(list_var, env.at(list_var), &per_node));
    if (d->node_rank < 0 || d->node_rank >= static_cast<int>(per_node.size())) {
      return Status::InvalidArgument("SLURM_NODEID=" + std::to_string(d->node_rank) + " has no entry in " + list_var +
                                     "='" + env.at(list_var) + "'");
    }
    d->local_world_size = per_node[d->node_rank];
  } else if (Has(env, "SLURM_NTASKS_PER_NODE")) {
    DT_RETURN_IF_ERROR(ParseInt(env, "SLURM_NTASKS_PER_NODE", &d->local_world_size));
  } else {
    d->local_world_size = d->world_size;
  }
  d->source = "slurm";
  return Status::OK();
}

// The variable names a source reads, so that errors name what the user must fix.
struct VarNames {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
  const char* node;
};

VarNames NamesOf(const std::string& source) {
  if (source == "ompi") {
    return {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
            "NODE_RANK"};
  }
  if (source == "slurm") {
    return {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE", "SLURM_NODEID"};
  }
  return {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK"};
}

Status Validate(const DistEnv& d) {
  const VarNames v = NamesOf(d.source);
  if (d.world_size < 1) {
    return Status::InvalidArgument(std::string(v.world) + "=" + std::to_string(d.world_size) + " must be >= 1");
  }
  DT_RETURN_IF_ERROR(CheckRange(v.rank, d.rank, 0, d.world_size, v.world));
  if (d.local_world_size < 1 || d.local_world_size > d.world_size) {
    return Status::InvalidArgument(std::string(v.local_world) + "=" + std::to_string(d.local_world_size) +
                                   " must be in [1, " + v.world + "=" + std::to_string(d.world_size) + "]");
  }
  DT_RETURN_IF_ERROR(CheckRange(v.local_rank, d.local_rank, 0, d.local_world_size, v.local_world));
  DT_RETURN_IF_ERROR(CheckRange(v.node, d.node_rank, 0, d.world_size, v.world));
  return Status::OK();
}

}  // namespace

Status DetectDistEnvFrom(const std::map<std::string, std::string>& env, DistEnv* out) {
  DistEnv d;
  if (Has(env, "RANK") || Has(env, "WORLD_SIZE")) {
    DT_RETURN_IF_ERROR(FromTorchrun(env, &d));
  } else if (Has(env, "OMPI_COMM_WORLD_RANK")) {
    DT_RETURN_IF_ERROR(FromOmpi(env, &d));
  } else if (Has(env, "SLURM_PROCID")) {
    DT_RETURN_IF_ERROR(FromSlurm(env, &d));
  }
  DT_RETURN_IF_ERROR(Validate(d));
  if (Has(env, "MASTER_ADDR")) {
    d.master_addr = env.at("MASTER_ADDR");
    if (d.master_addr.empty()) return Status::InvalidArgument("MASTER_ADDR is set but empty");
  }
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "MASTER_PORT", &d.master_port));
  if (d.master_port < 1 || d.master_port > 65535) {
    return Status::InvalidArgument("MASTER_PORT=" + std::to_string(d.master_port) + " is not a port in 1..65535");
  }
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "DTRAIN_RESTART_COUNT", &d.restart_count));
  if (d.restart_count < 0) {
    return Status::InvalidArgument("DTRAIN_RESTART_COUNT=" + std::to_string(d.restart_count) + " is negative");
  }
  d.launched = Has(env, "DTRAIN_RESTART_COUNT") && !env.at("DTRAIN_RESTART_COUNT").empty();
  d.slurm_job = Has(env, "SLURM_JOB_ID") && !env.at("SLURM_JOB_ID").empty();
  DT_RETURN_IF_ERROR(ParseOptionalInt(env, "SLURM_RESTART_COUNT", &d.requeue_count));
  if (d.requeue_count < 0) {
    return Status::InvalidArgument("SLURM_RESTART_COUNT=" + std::to_string(d.requeue_count) + " is negative");
  }
  *out = std::move(d);
  return Status::OK();
}

Status DetectDistEnv(DistEnv* out) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return DetectDistEnvFrom(env, out);
}

}  // namespace dtrain::comm
