#pragma once
// RunWorker: one training worker from its start to its end, the composition root of `dtrain train` (which is also
// what `dtrain launch` starts on every rank, through mpirun/srun or per node).
//
//   1. DistEnv: the worker's rank, world and restart counts, read from the environment once (comm/dist_env.h); a
//      process manager's MPI world is joined (MpiSession; argc/argv go to MPI_Init) and the logger learns the rank.
//   2. The config (runtime/config/config.h: the YAML file and the overrides, in order) and the whole run checked
//      (runtime/train/run_check.h); rank 0 logs what differs from the defaults.
//   3. The device: the GPU of the local rank (train.device auto|cuda) or the CPU.
//   4. The communicators: none for one process; MPI for host scalars (and the CPU gradients) plus NCCL for GPU
//      gradients under a process manager; over TCP (comm/tcp_bootstrap.h) for a torchrun-style start. A collective
//      watchdog (comm/watchdog.h) over them.
//   5. The Trainer (runtime/train/trainer.h), the spot-notice watcher of each host's local rank 0, then Run().
// The Status is the run's: OK (done, or a finished run started again with the config it was trained with),
// Preempted (a signal, a spot notice or an idle GPU stopped it and a checkpoint was saved: exit 75),
// InvalidArgument for input and refused starts (exit 2), anything else a failure; launcher/exit_codes.h maps it.
// A failed rank aborts NCCL so that its peers are released, and skips MPI_Finalize (which would wait for them).
//
// Threading: call once per process, from the main thread. The collective-failure callback runs on the watchdog's
// thread.

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

struct WorkerRequest {
  std::string config_path;
  std::vector<std::string> overrides;  // "key=value", applied in order (--set, --resume, --overwrite, ...)
  int* argc = nullptr;                 // the process's own, for MPI_Init
  char*** argv = nullptr;
  // The watchdog's verdict (a collective hung, a peer died): called on the watchdog's thread while the main thread
  // may be blocked inside MPI, so it must end the process itself. Required when the world has more than one rank.
  std::function<void(const Status&)> on_collective_failure;
};

struct WorkerOutcome {
  int rank = 0;
  // One process started by hand (DistEnv source "single", not by `dtrain launch`): only the caller knows the command
  // line that resumes it, so a Preempted status does not say how (else it ends "run the same command again to
  // resume", which is how a launcher or scheduler resumes a job).
  bool by_hand = false;
  // This host's spot watcher saw a termination notice (with Status::Preempted): the caller tells the launcher that
  // the host is going away (launcher/output_router.h kSpotNoticeLine).
  bool spot_noticed = false;
};

Status RunWorker(const WorkerRequest& req, WorkerOutcome* out);

}  // namespace dtrain::runtime
