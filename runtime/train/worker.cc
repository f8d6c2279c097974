#include "runtime/train/worker.h"

#include <cmath>
#include <memory>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "comm/tcp_bootstrap.h"
#include "comm/watchdog.h"
#include "core/check.h"
#include "core/device_context.h"
#include "core/logging.h"
#include "runtime/checkpoint/preemption.h"
#include "runtime/checkpoint/spot_watcher.h"
#include "runtime/config/config.h"
#include "runtime/train/auto_sizes.h"
#include "runtime/train/memory_fit.h"
#include "runtime/train/model_factory.h"
#include "runtime/train/run_check.h"
#include "runtime/train/trainer.h"

namespace dtrain::runtime {
namespace {

Status PickDevice(const std::string& want, int local_rank, std::unique_ptr<DeviceContext>* ctx) {
  const int gpus = CudaDeviceCount();
  if (want == "cpu" || (want == "auto" && gpus == 0)) return DeviceContext::CreateCpu(ctx);
  if (gpus == 0) {
    return Status::Unavailable("train.device is 'cuda' but no GPU is visible (run `dtrain doctor`)");
  }
  return DeviceContext::CreateCuda(local_rank % gpus, ctx);
}

// Everything after MPI and logging are up: config, device, communicators, watchdog, trainer.
Status RunWithEnv(const WorkerRequest& req, const comm::DistEnv& env, WorkerOutcome* out) {
  proto::Config cfg;
  DT_RETURN_IF_ERROR(LoadConfig(req.config_path, req.overrides, &cfg));
  DT_RETURN_IF_ERROR(ResolveAutoSizes(&cfg));                // model sizes given as 0 (auto), from the training data
  if (!cfg.checkpoint().enabled()) Preemption::UndoEarly();  // nothing reads the flag: SIGUSR1 ends the worker
  RunCheck check;
  DT_RETURN_IF_ERROR(CheckRun(cfg, env.world_size, &check));
  // `dtrain launch` (which sets DTRAIN_RESTART_COUNT for its workers: env.launched) printed these once already.
  if (env.rank == 0 && !env.launched) {
    for (const std::string& w : check.warnings) DT_LOG_WARN(kRuntime, "{}", w);
  }
  if (env.rank == 0) {  // the whole resolved config is <run.dir>/config.yaml; the log shows what differs
    std::string diff;
    DT_RETURN_IF_ERROR(ConfigDiffYaml(cfg, &diff));
    DT_LOG_INFO(kRuntime, "config {} (what differs from the defaults; all of it: dtrain config show {}):\n{}",
                req.config_path, req.config_path, diff);
  }

  std::unique_ptr<DeviceContext> ctx;
  DT_RETURN_IF_ERROR(PickDevice(cfg.train().device(), env.local_rank, &ctx));
  DT_LOG_INFO(kRuntime, "rank {}/{} (local {}) on {}{}; started by {}", env.rank, env.world_size, env.local_rank,
              DeviceName(ctx->type()), ctx->is_cuda() ? ":" + std::to_string(ctx->device_index()) : "", env.source);
  // The memory plan on this device (runtime/train/memory_fit.h): a budget picks the activation checkpointing here
  // (into cfg, so config.yaml and checkpoints record it); a plan that cannot fit stops the run before anything is
  // allocated (`dtrain launch` refused it already unless another launcher started this worker).
  MemoryFit fit;
  DT_RETURN_IF_ERROR(FitMemory(&cfg, env.world_size, ctx->is_cuda(),
                               ctx->is_cuda() ? CudaDeviceMemoryBytes(ctx->device_index()) : 0, &fit));
  DT_RETURN_IF_ERROR(CheckHostMemory(cfg, fit.plan, env.local_world_size, HostMemoryAvailable()));
  if (env.rank == 0 && fit.planned) DT_LOG_INFO(kRuntime, "{}", DescribeMemoryFit(fit));

  std::unique_ptr<comm::Communicator> host_comm, nccl_comm;
  comm::Communicator* grad_comm = nullptr;
  if (env.world_size > 1 && comm::NeedsTcpBootstrap(env)) {
    // Started by torchrun-style variables alone (a per-node launcher, a Kubernetes job): no MPI world. The ranks
    // meet over TCP on MASTER_ADDR:MASTER_PORT; host scalars go over those links, gradients over NCCL (GPU only).
    comm::TcpBootstrapOptions tcp;
    tcp.cuda = ctx->is_cuda();
    tcp.device = ctx->is_cuda() ? ctx->device_index() : 0;
    tcp.collective_timeout_s = cfg.dist().collective_timeout_s();
    DT_RETURN_IF_ERROR(comm::CreateCommunicatorsOverTcp(env, tcp, &host_comm, &nccl_comm));
    grad_comm = nccl_comm.get();
  } else if (env.world_size > 1) {
    DT_RETURN_IF_ERROR(comm::CreateCommunicator(comm::Backend::kMpi, {}, &host_comm));
    grad_comm = host_comm.get();
    if (ctx->is_cuda()) {
      comm::CommOptions opts;
      opts.device = ctx->device_index();
      DT_RETURN_IF_ERROR(comm::CreateCommunicator(comm::Backend::kNccl, opts, &nccl_comm));
      grad_comm = nccl_comm.get();
    }
  }

  // Declared after the communicators it watches (destroyed before them), before the trainer that arms it.
  std::unique_ptr<comm::Watchdog> watchdog;
  if (env.world_size > 1) {
    if (!req.on_collective_failure) return Status::InvalidArgument("RunWorker: no on_collective_failure callback");
    std::vector<comm::Communicator*> watched = {host_comm.get()};
    if (nccl_comm) watched.push_back(nccl_comm.get());
    comm::WatchdogOptions wo;
    wo.timeout_s = cfg.dist().collective_timeout_s();
    DT_RETURN_IF_ERROR(comm::Watchdog::Create(watched, wo, req.on_collective_failure, &watchdog));
  }

  std::unique_ptr<Trainer> trainer;
  DT_RETURN_IF_ERROR(Trainer::Create(cfg, *ctx, grad_comm, host_comm.get(), env, &trainer));
  trainer->set_watchdog(watchdog.get());
  // Each host's local rank 0 watches its own host's notice endpoint; the ranks agree on the preemption flag at every
  // step boundary (trainer.h), so a notice on any host makes the whole job checkpoint and exit 75.
  std::unique_ptr<SpotWatcher> spot;
  if (env.local_rank == 0 && cfg.checkpoint().enabled() && !cfg.checkpoint().spot_notice_url().empty()) {
    DT_RETURN_IF_ERROR(
        SpotWatcher::Create({cfg.checkpoint().spot_notice_url(), cfg.checkpoint().spot_poll_s()}, &spot));
  }
  TrainSummary s;
  const Status st = trainer->Run(&s);
  if (st.code() == Status::Code::kPreempted) {
    // Every rank stopped after the same step and rank 0's checkpoint is durable (trainer.h): a clean exit.
    out->spot_noticed = spot && spot->noticed();
    if (out->by_hand) return st;  // the caller adds the command that resumes and prints it
    const Status stopped = Status::Preempted(st.message() + "; run the same command again to resume");
    if (env.rank == 0) DT_LOG_WARN(kRuntime, "{}", stopped.message());
    return stopped;
  }
  if (!st.ok()) {
    // Tear the collectives down so peers blocked in them are released, then report.
    if (nccl_comm) (void)nccl_comm->Abort();
    return st.WithContext("rank " + std::to_string(env.rank));
  }
  if (env.rank == 0 && !s.already_done) {
    // Evaluation off: no eval figures (they would read "nan"). Token models: the perplexity, as on the eval line.
    const std::string eval =
        std::isnan(s.eval_loss) ? std::string()
        : TokensPerSample(cfg) > 0
            ? fmt::format("; eval loss {:.4f}, ppl {:.2f}", s.eval_loss, std::exp(s.eval_loss))
            : fmt::format("; eval loss {:.4f}, accuracy {:.2f}%", s.eval_loss, 100 * s.eval_accuracy);
    DT_LOG_INFO(kRuntime, "done: {} steps, {} samples in {:.1f} s ({:.0f} samples/s); last train loss {:.4f}{}",
                s.steps, s.samples, s.seconds, s.samples_per_s, s.last_train_loss, eval);
  }
  return Status::OK();
}

}  // namespace

Status RunWorker(const WorkerRequest& req, WorkerOutcome* out) {
  // Before anything slow (MPI wire-up, the device, the data, the store's preflight): a checkpoint request (SIGUSR1)
  // during the start is remembered for the first step, not fatal (runtime/checkpoint/preemption.h).
  Preemption::InstallEarly();
  *out = WorkerOutcome();
  comm::DistEnv env;
  DT_RETURN_IF_ERROR(comm::DetectDistEnv(&env));
  // A process manager (mpirun, srun) started us: join its MPI world. The MPI session outlives the
  // communicators and the trainer (declared first, destroyed last).
  std::unique_ptr<comm::MpiSession> mpi;
  if (!comm::NeedsTcpBootstrap(env) && (env.source == "ompi" || env.source == "slurm" || env.world_size > 1)) {
    DT_RETURN_IF_ERROR(comm::MpiSession::Init(req.argc, req.argv, &mpi));
    if (mpi->world_size() != env.world_size) {
      return Status::InvalidArgument("the environment says world size " + std::to_string(env.world_size) + " (" +
                                     env.source + ") but the MPI world has " + std::to_string(mpi->world_size()) +
                                     " process(es): start workers with `dtrain launch`, mpirun or srun --mpi=pmix");
    }
    env.rank = mpi->rank();
    env.local_rank = mpi->local_rank();
  }
  out->rank = env.rank;
  out->by_hand = env.source == "single" && !env.launched;
  log::Init(env.rank);
  Status st = RunWithEnv(req, env, out);
  // A failed rank must not MPI_Finalize: that waits for peers, which may be blocked in a collective
  // this rank will never join. It exits with its error; the process manager ends the others.
  // A preempted job is the exception: all ranks left the loop together, so MPI_Finalize is safe.
  if (!st.ok() && st.code() != Status::Code::kPreempted && mpi) mpi->SkipFinalize();
  return st;
}

}  // namespace dtrain::runtime
