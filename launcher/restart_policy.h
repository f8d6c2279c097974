#pragma once
// RestartPolicy: what the one attempt loop of `dtrain launch` (launcher/attempt_loop.h) asks between attempts — the
// seam between that loop and a way of choosing each attempt's hosts. The policies, one file each:
//   fixed     launcher/fixed_restart.h: the same command every attempt (--max-restarts K; mpirun, srun, per-node).
//   hostfile  launcher/elastic_launch.h: --nnodes MIN:MAX over --hosts/--hostfile; hosts dropped, rejoined, grown.
//   Slurm     launcher/slurm_elastic.h: --nnodes MIN:MAX inside an allocation; nodes Slurm took away dropped.
//
// One attempt, as the loop runs it:
//  1. Plan: the policy picks the attempt's command (host set, world size, batch re-plan; it resumes from the
//     newest checkpoint by itself) and how the logs name it, or says to stop (fewer than MIN hosts left).
//  2. Begin, the backend's RunAttempt (launcher/launch_backend.h), End: the policy may watch the hosts meanwhile.
//  3. Classify: how the attempt ended (AttemptKind) and the hosts concerned.
//  4. Apply: the policy acts on it (hosts dropped or rejoined, its warning line, the elastic.jsonl record of
//     launcher/attempt_log.h), then the loop logs the backend's failure report where the kind calls for one and
//     decides: done -> exit 0; stopped -> the code AfterFailure gives (launcher/attempt_outcome.h); failure ->
//     counted against --max-restarts, restarted while restarts are left; lost host, notice, grow -> restarted,
//     not counted.
// Not thread-safe: the supervising thread calls it (a host watch started in Begin runs until End).

#include <string>
#include <vector>

#include "launcher/launch_command.h"
#include "launcher/output_dialect.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

// How an attempt ended.
enum class AttemptKind {
  kDone,      // every rank exited 0
  kLostHost,  // hosts of the attempt are gone (silent, killed, dropped by Slurm): restart on the survivors
  kNotice,    // a spot termination notice: the job saved and exited 75; restart without the noticing hosts
  kGrow,      // dropped or new hosts answer again: the job saved on request and exited 75; restart on more
  kFailure,   // anything else: counted against --max-restarts
  kStopped,   // SIGINT/SIGTERM to the launcher, a usage/config error (exit 2), or exit 75 nobody here asked for
};
// The kind as elastic.jsonl's "reason": done, lost_host, notice, grow, failure, stopped.
const char* AttemptKindName(AttemptKind kind);

// What the backend saw of an attempt's end (launcher/launch_backend.h fills it).
struct AttemptEnd {
  bool done = false;              // every rank exited 0
  int exit_code = 0;              // else: the root cause's code (the process manager's own when no rank was named)
  int stop_signal = 0;            // SIGINT/SIGTERM the launcher received during the attempt, else 0
  std::string who;                // the root cause, for the log: "rank 3", "mpirun"
  RankExit cause;                 // the root-cause rank (rank -1: none named), its host and how it ended
  std::string finished;           // done: the backend's line saying so ("the job finished (mpirun exited 0)")
  std::string report;             // the failure report (rank, host, code, last lines); empty after a stop or exit 75
  std::vector<int> notice_ranks;  // ranks that wrote the spot-notice line (output_router.h)
  std::vector<std::string> lost_daemon_hosts;  // hosts the process manager lost its daemon (or node) on
};

// The kind every policy starts from: done, stopped (a signal to the launcher, exit 75 or 2), else failure.
AttemptKind BasicKind(const AttemptEnd& end);

// One attempt, as the policy planned it.
struct AttemptPlan {
  int attempt = 0;    // 0-based: DTRAIN_RESTART_COUNT
  LaunchCommand cmd;  // what runs
  std::string title;  // logged with the command: "attempt 2 of 4", "elastic attempt 2 on 3 host(s), world size 3"
  std::string when;   // the failure report's parenthesis: "attempt 2 of 4", "elastic attempt 2; 0 of 3 restarts used"
};

struct AttemptVerdict {
  AttemptKind kind = AttemptKind::kFailure;
  std::vector<std::string> hosts;  // kLostHost, kNotice: the hosts to drop
  bool report = true;              // log the backend's failure report (false: a host event ended the attempt)
};

class RestartPolicy {
 public:
  virtual ~RestartPolicy() = default;
  // Step 1 for attempt `attempt` after `failures` counted failures: fills `plan` and returns -1, or returns the
  // launcher's exit code to stop with, having said why.
  virtual int Plan(int attempt, int failures, AttemptPlan* plan) = 0;
  // Step 2: around the backend's run of `plan`.
  virtual void Begin(const AttemptPlan& /*plan*/, SupervisorScope* /*scope*/) {}
  virtual void End() {}
  // Step 3.
  virtual AttemptVerdict Classify(const AttemptPlan& plan, const AttemptEnd& end) = 0;
  // Step 4, before the loop's report and decision.
  virtual void Apply(const AttemptPlan& plan, const AttemptEnd& end, const AttemptVerdict& verdict) = 0;
};

}  // namespace dtrain::launcher
