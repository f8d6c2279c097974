#include "launcher/cli/train_cmd.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "comm/tcp_bootstrap.h"
#include "comm/watchdog.h"
#include "core/check.h"
#include "core/device_context.h"
#include "core/logging.h"
#include "launcher/cli/cli_parse.h"
#include "launcher/exit_codes.h"
#include "launcher/output_router.h"
#include "runtime/checkpoint/spot_watcher.h"
#include "runtime/config/config.h"
#include "runtime/train/model_factory.h"
#include "runtime/train/run_check.h"
#include "runtime/train/trainer.h"

namespace dtrain::launcher {
namespace {

Status PickDevice(const std::string& want, int local_rank, std::unique_ptr<DeviceContext>* ctx) {
  const int gpus = CudaDeviceCount();
  if (want == "cpu" || (want == "auto" && gpus == 0)) return DeviceContext::CreateCpu(ctx);
  if (gpus == 0) {
    return Status::Unavailable("train.device is 'cuda' but no GPU is visible (run `dtrain doctor`)");
  }
  return DeviceContext::CreateCuda(local_rank % gpus, ctx);
}

// The watchdog's verdict: the job is lost (a collective hung or a peer died). The main thread may be
// blocked inside MPI, where nothing can interrupt it, so this ends the process from the watchdog
// thread: print the error as main() would, flush what the user must see, exit 1 without running
// destructors (they would wait on the hung collective). mpirun/srun then end the other ranks.
[[noreturn]] void ExitOnCollectiveFailure(const Status& st) {
  std::fprintf(stderr, "dtrain: error: %s\n", st.ToString().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitFailure);
}

// Everything after MPI and logging are up: config, device, communicators, watchdog, trainer.
Status RunWorker(const std::string& config_path, const std::vector<std::string>& overrides, const comm::DistEnv& env) {
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::LoadConfig(config_path, overrides, &cfg));
  runtime::RunCheck check;
  DT_RETURN_IF_ERROR(runtime::CheckRun(cfg, env.world_size, &check));
  // `dtrain launch` (which sets DTRAIN_RESTART_COUNT for its workers) printed these once already.
  if (env.rank == 0 && std::getenv("DTRAIN_RESTART_COUNT") == nullptr) {
    for (const std::string& w : check.warnings) DT_LOG_WARN(kRuntime, "{}", w);
  }
  if (env.rank == 0) {  // the whole resolved config is <run.dir>/config.yaml; the log shows what differs
    std::string diff;
    DT_RETURN_IF_ERROR(runtime::ConfigDiffYaml(cfg, &diff));
    DT_LOG_INFO(kRuntime, "config {} (what differs from the defaults; all of it: dtrain config show {}):\n{}",
                config_path, config_path, diff);
  }

  std::unique_ptr<DeviceContext> ctx;
  DT_RETURN_IF_ERROR(PickDevice(cfg.train().device(), env.local_rank, &ctx));
  DT_LOG_INFO(kRuntime, "rank {}/{} (local {}) on {}{}; started by {}", env.rank, env.world_size, env.local_rank,
              DeviceName(ctx->type()), ctx->is_cuda() ? ":" + std::to_string(ctx->device_index()) : "", env.source);

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
    std::vector<comm::Communicator*> watched = {host_comm.get()};
    if (nccl_comm) watched.push_back(nccl_comm.get());
    comm::WatchdogOptions wo;
    wo.timeout_s = cfg.dist().collective_timeout_s();
    DT_RETURN_IF_ERROR(comm::Watchdog::Create(watched, wo, ExitOnCollectiveFailure, &watchdog));
  }

  std::unique_ptr<runtime::Trainer> trainer;
  DT_RETURN_IF_ERROR(runtime::Trainer::Create(cfg, *ctx, grad_comm, host_comm.get(), env, &trainer));
  trainer->set_watchdog(watchdog.get());
  // Each host's local rank 0 watches its own host's notice endpoint; the ranks agree on the preemption flag at every
  // step boundary (trainer.h), so a notice on any host makes the whole job checkpoint and exit 75.
  std::unique_ptr<runtime::SpotWatcher> spot;
  if (env.local_rank == 0 && cfg.checkpoint().enabled() && !cfg.checkpoint().spot_notice_url().empty()) {
    DT_RETURN_IF_ERROR(
        runtime::SpotWatcher::Create({cfg.checkpoint().spot_notice_url(), cfg.checkpoint().spot_poll_s()}, &spot));
  }
  runtime::TrainSummary s;
  const Status st = trainer->Run(&s);
  if (st.code() == Status::Code::kPreempted) {
    // Every rank stopped after the same step and rank 0's checkpoint is durable (trainer.h): a clean exit.
    if (env.rank == 0) DT_LOG_WARN(kRuntime, "{}", st.message());
    // Tells the launcher which host is going away (launcher/output_router.h): it continues without it.
    if (spot && spot->noticed()) std::fprintf(stderr, "%s\n", kSpotNoticeLine);
    return st;
  }
  if (!st.ok()) {
    // Tear the collectives down so peers blocked in them are released, then report.
    if (nccl_comm) (void)nccl_comm->Abort();
    return st.WithContext("rank " + std::to_string(env.rank));
  }
  if (env.rank == 0 && !s.already_done) {
    // Evaluation off: no eval figures (they would read "nan").
    const std::string eval = std::isnan(s.eval_loss) ? std::string()
                                                     : fmt::format("; eval loss {:.4f}, accuracy {:.2f}%", s.eval_loss,
                                                                   100 * s.eval_accuracy);
    DT_LOG_INFO(kRuntime, "done: {} steps, {} samples in {:.1f} s ({:.0f} samples/s); last train loss {:.4f}{}",
                s.steps, s.samples, s.seconds, s.samples_per_s, s.last_train_loss, eval);
  }
  return Status::OK();
}

}  // namespace

CLI::App* AddTrainCommand(CLI::App* parent, TrainArgs* out) {
  *out = TrainArgs();
  CLI::App* app =
      parent->add_subcommand("train", "run one worker (what `launch` starts; also under mpirun/srun --mpi=pmix)");
  app->footer(
      "example: mpirun -np 2 dtrain train configs/fashion_mnist_mlp.yaml --set optim.lr=0.01 "
      "--set model.mlp.hidden=[512,256]\n");
  app->add_option_function<std::string>(
         "--set", [out](const std::string& v) { out->overrides.push_back(v); },
         "override a config key, e.g. --set optim.lr=0.01; repeatable")
      ->type_name("key=value")
      ->trigger_on_parse();
  app->add_option_function<std::string>(
         "--resume", [out](const std::string& v) { out->overrides.push_back("checkpoint.resume=" + v); },
         "where to resume from (= --set checkpoint.resume=...; default auto)")
      ->type_name("auto|never|STEP")
      ->trigger_on_parse();
  app->add_flag_callback(
         "--overwrite", [out] { out->overrides.push_back("checkpoint.overwrite=true"); },
         "start over in a run directory that holds checkpoints: move them aside first (= --set "
         "checkpoint.overwrite=true)")
      ->trigger_on_parse();
  app->add_flag_callback(
         "--idle-exit", [out] { out->overrides.push_back("run.gpu_idle_exit=true"); },
         "a GPU idle for run.gpu_idle_s stops the run: checkpoint, then exit 75 (= --set run.gpu_idle_exit=true)")
      ->trigger_on_parse();
  app->add_option("CONFIG", out->config, "a YAML config (configs/*.yaml)");
  app->callback([out] {
    if (out->config.empty()) FailParse("missing CONFIG (usage: dtrain train CONFIG [--set key=value ...])");
  });
  return app;
}

Status RunTrain(int* argc, char*** argv, const TrainArgs& args) {
  const std::string& config_path = args.config;
  const std::vector<std::string>& overrides = args.overrides;

  comm::DistEnv env;
  DT_RETURN_IF_ERROR(comm::DetectDistEnv(&env));
  // A process manager (mpirun, srun) started us: join its MPI world. The MPI session outlives the
  // communicators and the trainer (declared first, destroyed last).
  std::unique_ptr<comm::MpiSession> mpi;
  if (!comm::NeedsTcpBootstrap(env) && (env.source == "ompi" || env.source == "slurm" || env.world_size > 1)) {
    DT_RETURN_IF_ERROR(comm::MpiSession::Init(argc, argv, &mpi));
    if (mpi->world_size() != env.world_size) {
      return Status::InvalidArgument("the environment says world size " + std::to_string(env.world_size) + " (" +
                                     env.source + ") but the MPI world has " + std::to_string(mpi->world_size()) +
                                     " process(es): start workers with `dtrain launch`, mpirun or srun --mpi=pmix");
    }
    env.rank = mpi->rank();
    env.local_rank = mpi->local_rank();
  }
  log::Init(env.rank);
  Status st = RunWorker(config_path, overrides, env);
  // A failed rank must not MPI_Finalize: that waits for peers, which may be blocked in a collective
  // this rank will never join. It exits with its error; the process manager ends the others.
  // A preempted job is the exception: all ranks left the loop together, so MPI_Finalize is safe.
  if (!st.ok() && st.code() != Status::Code::kPreempted && mpi) mpi->SkipFinalize();
  return st;
}

}  // namespace dtrain::launcher
