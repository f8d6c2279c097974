#include "launcher/cli/launch_check.h"

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "core/logging.h"
#include "runtime/config/config.h"
#include "runtime/train/auto_sizes.h"
#include "runtime/train/memory_fit.h"
#include "runtime/train/prometheus_feed.h"
#include "runtime/train/run_check.h"

namespace dtrain::launcher {

Status CheckRunBeforeStart(const LaunchOptions& opts, const LaunchEnv& env, const LaunchCommand& cmd, bool* on_cuda,
                           std::string* memory_plan) {
  const int world_size = cmd.placement.world_size();
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::LoadConfig(opts.config, opts.sets, &cfg));
  DT_RETURN_IF_ERROR(runtime::ResolveAutoSizes(&cfg));  // as each worker does, before its run check
  // Copies: FitMemory below may replace cfg's messages (the budget's choice), which would leave references dangling.
  const std::string device = cfg.train().device();
  *on_cuda = device == "cuda" || (device != "cpu" && env.gpu_count > 0);
  // A dry run on a machine without a GPU (a cluster's login node) of a config that runs on GPUs only (a 16- or 8-bit
  // train.precision) plans for the GPU it will run on; that GPU's memory is unknown here, so only
  // train.memory_budget_gib is checked.
  const std::string precision = cfg.train().precision();
  const bool plan_for_gpu = opts.dry_run && !*on_cuda && device != "cpu" && precision != "fp32" && precision != "auto";
  *on_cuda |= plan_for_gpu;
  if (cmd.backend == Backend::kNode && world_size > 1 &&
      (device == "cpu" || (device != "cuda" && env.gpu_count == 0))) {
    return Status::InvalidArgument(
        "--node-rank: a per-node start (no mpirun) of " + std::to_string(world_size) + " ranks needs GPUs, but " +
        opts.config + " trains on the CPU (train.device: " + device +
        (device == "cpu" ? "" : ", and this machine has no GPU") +
        "): the CPU path reduces gradients with MPI, which workers started without mpirun/srun cannot form. Start it "
        "with `dtrain launch --hosts/--hostfile` (mpirun) or srun instead");
  }
  runtime::RunCheck check;
  std::vector<Status> problems = {runtime::CheckRun(cfg, world_size, &check)};
  // A Prometheus port in use here would stop this node's local rank 0 (exit 2) after the start: found now, when
  // ranks run on this machine (other hosts' ports are checked by their ranks).
  bool ranks_here = cmd.backend == Backend::kNode;
  for (const HostSlots& h : cmd.placement.hosts) ranks_here |= h.name == "localhost" || h.name == env.hostname;
  if (ranks_here) problems.push_back(runtime::CheckPrometheusEndpoint(cfg.run()));
  if (problems[0].ok()) {  // a config the run check refused has no plan worth printing (its errors would repeat)
    runtime::MemoryFit fit;
    const int64_t gpu_bytes = *on_cuda && env.gpu_count > 0 ? CudaDeviceMemoryBytes(0) : 0;
    problems.push_back(runtime::FitMemory(&cfg, world_size, *on_cuda, gpu_bytes, &fit));
    // Host memory for offloaded optimizer state, for the ranks this machine runs (not in a dry run, which may plan
    // on another machine than the nodes': every worker checks its own machine again).
    const int local_ranks = LocalRanks(opts, cmd);
    if (problems.back().ok() && local_ranks > 0 && !opts.dry_run) {
      problems.push_back(runtime::CheckHostMemory(cfg, fit.plan, local_ranks, runtime::HostMemoryAvailable()));
    }
    if (problems.back().ok() && fit.planned) *memory_plan = runtime::DescribeMemoryFit(fit);
    if (plan_for_gpu && !memory_plan->empty()) {
      *memory_plan += "\n(no GPU here: planned for a CUDA device, train.precision " + precision +
                      " runs on GPUs only; set train.memory_budget_gib to check the plan against a GPU's memory)";
    }
  }
  for (const std::string& w : check.warnings) DT_LOG_WARN(kLauncher, "{}", w);
  return runtime::JoinProblems(problems);
}

}  // namespace dtrain::launcher
