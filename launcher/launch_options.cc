#include "launcher/launch_options.h"

#include <CLI/CLI.hpp>

#include "launcher/cli_parse.h"
#include "launcher/elastic_plan.h"
#include "launcher/hostfile.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kFooter =
    "Starts one `dtrain train CONFIG` worker per GPU (or CPU rank) on every node through mpirun\n"
    "(or srun inside a Slurm allocation), supervises them, names the rank that failed first and\n"
    "exits with its code (0 done, 2 usage error, 75 preempted: requeue, 128+S killed by signal S).\n"
    "Console: rank 0's output plus WARN/ERROR lines of every rank. SIGUSR1, SIGTERM and SIGINT (Ctrl-C)\n"
    "reach every rank (checkpoint and exit 75; SIGTERM/SIGINT stop the job after the grace period; a\n"
    "second one stops it at once).\n"
    "\n"
    "example: dtrain launch --nproc-per-node 2 --max-restarts 3 configs/fashion_mnist_mlp.yaml --set optim.lr=0.05\n";

std::string CheckNproc(const std::string& v) {
  if (v == "gpu" || v == "cpu" || v == "auto" || PositiveInt()(v).empty()) return "";
  return "expected a positive integer or gpu|cpu|auto, got '" + v + "'";
}

std::string CheckHosts(const std::string& v) {
  std::vector<HostSlots> hosts;
  const Status st = ParseHostList(v, &hosts);
  return st.ok() ? "" : st.message();
}

std::string CheckNotEmpty(const std::string& v) { return v.empty() ? "empty path" : ""; }

// torchrun's flags that mean nothing to dtrain launch, each answered with the dtrain way instead of "unknown flag".
struct TorchrunHabit {
  const char* names;  // CLI11 names: the dashed spelling (named in the message), then torchrun's underscore one
  const char* name;
  bool takes_value;
  const char* hint;
};
constexpr const char* kNoRendezvous =
    "dtrain launch needs no rendezvous: to start every node from here give --hosts a:8,b:8 or --hostfile F (mpirun "
    "over ssh); to start each node yourself give each one --nnodes N --node-rank R --master-addr HOST [--master-port "
    "P] (node 0's address); under Slurm the allocation is the host set";
constexpr TorchrunHabit kTorchrunHabits[] = {
    {"--standalone", "--standalone", false,
     "dtrain launch is single-node by default (mpirun on this host, nothing to set up); drop --standalone"},
    {"--rdzv-endpoint,--rdzv_endpoint", "--rdzv-endpoint", true, kNoRendezvous},
    {"--rdzv-backend,--rdzv_backend", "--rdzv-backend", true, kNoRendezvous},
    {"--rdzv-id,--rdzv_id", "--rdzv-id", true, kNoRendezvous},
    {"--rdzv-conf,--rdzv_conf", "--rdzv-conf", true, kNoRendezvous},
};

}  // namespace

std::string FixedNodesHint(int min_nodes, int max_nodes) {
  if (min_nodes != max_nodes) return "";
  const std::string n = std::to_string(min_nodes);
  return "; for a fixed " + n + " node(s) write --nnodes " + n;
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kMpirun:
      return "mpirun";
    case Backend::kSrun:
      return "srun";
    case Backend::kNode:
      return "node";
  }
  return "?";
}

CLI::App* AddLaunchCommand(CLI::App* parent, LaunchOptions* o) {
  *o = LaunchOptions();
  CLI::App* app = parent->add_subcommand(
      "launch", "start one worker per GPU (or CPU rank) across nodes and supervise them (torchrun-like)");
  app->footer(kFooter);
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->add_option("--nproc-per-node,--nproc_per_node", o->nproc_per_node,
                  "workers per node: N, gpu (visible GPUs), cpu (2), auto (GPUs if any, else 2; with hosts and "
                  "no explicit N/gpu: each host's slots) (default auto)")
      ->type_name("N|gpu|cpu|auto")
      ->check(CheckNproc);
  app->add_option_function<std::string>(
         "--nnodes",
         [o](const std::string& v) {
           int lo = 0, hi = 0;
           bool elastic = false;
           if (!ParseNodeRange(v, &lo, &hi, &elastic).ok()) return;  // the check below reported it
           o->nnodes = elastic ? 0 : lo;
           o->elastic_min = elastic ? lo : 0;
           o->elastic_max = elastic ? hi : 0;
         },
         "nodes to use (the first N hosts; under Slurm: srun --nodes); MIN:MAX: an elastic host set of "
         "--hosts/--hostfile (a lost host is dropped, a returning one added; docs/spot.md), or under Slurm of the "
         "allocation's nodes (a lost node is dropped; sbatch --no-kill; docs/slurm.md)")
      ->type_name("N|MIN:MAX")
      ->check([](const std::string& v) {
        if (v.find(':') == std::string::npos) return PositiveInt()(v);
        int lo = 0, hi = 0;
        bool elastic = false;
        const Status st = ParseNodeRange(v, &lo, &hi, &elastic);
        return st.ok() ? std::string() : st.message().substr(st.message().find(": ") + 2);
      });
  app->add_option("--elastic-batch", o->elastic_batch,
                  "with --nnodes MIN:MAX: keep the global batch (grad accumulation adjusted; default) or the per-GPU "
                  "batch across host-set changes (then the LR schedule and the run length count samples)")
      ->type_name("global|per-gpu")
      ->check(OneOf({"global", "per-gpu"}));
  app->add_option("--rejoin-after", o->rejoin_after,
                  "with --nnodes MIN:MAX: a lost host is probed again S seconds after it was dropped (default 30)")
      ->type_name("S")
      ->check(NonNegativeInt());
  app->add_option("--wait-for-hosts", o->wait_for_hosts,
                  "with --nnodes MIN:MAX: when fewer than MIN hosts are left, wait up to S seconds for lost hosts to "
                  "answer again instead of stopping (default 0: stop)")
      ->type_name("S")
      ->check(NonNegativeInt());
  app->add_option("--node-rank,--node_rank", o->node_rank,
                  "per-node start without mpirun/ssh/Slurm: this node's index 0..N-1 of --nnodes N; starts "
                  "--nproc-per-node workers here with torchrun's RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT "
                  "(needs --nnodes and --master-addr; the nodes' launchers watch each other on MASTER_PORT+1)")
      ->type_name("R")
      ->check(NonNegativeInt());
  app->add_option("--master-addr,--master_addr", o->master_addr,
                  "per-node start: the address of node 0, where rank 0 and node 0's launcher listen")
      ->type_name("HOST")
      ->check(CheckNotEmpty);
  app->add_option("--master-port,--master_port", o->master_port,
                  "per-node start: rank 0's rendezvous port; node 0's launcher listens on PORT+1 (default "
                  "$MASTER_PORT, else 29500)")
      ->type_name("PORT")
      ->check(CLI::Range(1, 65534));
  app->add_option("--secret-file,--secret_file", o->secret_file,
                  "the job secret every node's launcher and worker proves to the others (mode 0600; make it with "
                  "`openssl rand -hex 32 > FILE && chmod 600 FILE`, the same file on every node); default "
                  "$DTRAIN_JOB_SECRET, then $DTRAIN_JOB_SECRET_FILE; a one-node job makes its own")
      ->type_name("FILE")
      ->check(CheckNotEmpty);
  app->add_option("--hosts", o->hosts, "hosts and their process counts")->type_name("a:8,b:8")->check(CheckHosts);
  app->add_option("--hostfile", o->hostfile, "Open MPI / DeepSpeed hostfile: `host slots=N` per line")
      ->type_name("F")
      ->check(CheckNotEmpty);
  app->add_option("--max-restarts,--max_restarts", o->max_restarts,
                  "restart the whole job up to K times after a failure, with DTRAIN_RESTART_COUNT=1..K "
                  "(default 0; never on exit 2 or 75)")
      ->type_name("K")
      ->check(NonNegativeInt());
  app->add_option("--log-dir", o->log_dir, "write each rank's complete output to D/rank-N.log")
      ->type_name("D")
      ->check(CheckNotEmpty);
  app->add_option("--grace-seconds", o->grace_seconds,
                  "after a failure or a signal, wait S seconds before SIGTERM, then S more before SIGKILL "
                  "(default 10)")
      ->type_name("S")
      ->check(NonNegativeInt());
  app->add_option_function<std::string>(
         "--backend",
         [o](const std::string& v) {
           o->backend = v == "mpirun" ? Backend::kMpirun : v == "srun" ? Backend::kSrun : Backend::kAuto;
         },
         "process manager (auto: srun when SLURM_JOB_ID is set and no hosts are given, else mpirun)")
      ->type_name("auto|mpirun|srun")
      ->check(OneOf({"auto", "mpirun", "srun"}));
  // Repeatable flags append as they are met, so that --set and --resume keep their relative order.
  app->add_option_function<std::string>(
         "--mpirun-arg", [o](const std::string& v) { o->backend_args.push_back(v); },
         "pass X to mpirun (or srun); repeatable")
      ->type_name("X")
      ->trigger_on_parse();
  app->add_option_function<std::string>(
         "--resume", [o](const std::string& v) { o->sets.push_back("checkpoint.resume=" + v); },
         "where workers resume from (= --set checkpoint.resume=...; default auto: the newest valid checkpoint)")
      ->type_name("auto|never|STEP")
      ->check(ResumeValue())
      ->trigger_on_parse();
  app->add_flag_callback(
         "--overwrite", [o] { o->sets.push_back("checkpoint.overwrite=true"); },
         "start over in a run directory that holds checkpoints: move them aside first; with --resume N, move the "
         "checkpoints newer than N aside and train on from N (= --set checkpoint.overwrite=true; without it such a "
         "start is refused)")
      ->trigger_on_parse();
  app->add_flag_callback(
         "--idle-exit", [o] { o->sets.push_back("run.gpu_idle_exit=true"); },
         "a GPU idle for run.gpu_idle_s stops the job: checkpoint, then exit 75 (= --set run.gpu_idle_exit=true)")
      ->trigger_on_parse();
  app->add_option_function<std::string>(
         "--set", [o](const std::string& v) { o->sets.push_back(v); }, "override a config key; repeatable")
      ->type_name("key=value")
      ->check([](const std::string& v) {
        const auto eq = v.find('=');
        return eq == std::string::npos || eq == 0 ? "expected key=value, got '" + v + "'" : std::string();
      })
      ->trigger_on_parse();
  app->add_flag("--oversubscribe", o->oversubscribe,
                "start more ranks on this machine than it has slots (CPU cores; GPUs when training on CUDA)")
      ->disable_flag_override();
  app->add_flag("--dry-run", o->dry_run, "print the command that would run and exit")->disable_flag_override();
  app->add_option("CONFIG", o->config, "a YAML config (configs/*.yaml)");
  // torchrun's flags that mean nothing to dtrain: hidden (no help, no completion), each refused with the dtrain way.
  for (const TorchrunHabit& h : kTorchrunHabits) {
    app->add_option(h.names)->group("")->expected(0, h.takes_value ? 1 : 0);
  }
  app->callback([o, app] {
    for (const TorchrunHabit& h : kTorchrunHabits) {
      if (app->count(h.name) > 0) FailParse(std::string(h.name) + ": " + h.hint);
    }
    o->nproc_given = app->count("--nproc-per-node") > 0;
    if (o->config.empty()) FailParse("missing CONFIG (usage: dtrain launch [options] CONFIG)");
    if (!o->hosts.empty() && !o->hostfile.empty()) FailParse("--hosts and --hostfile: give one of them, not both");
    if (o->elastic_min > 0) {
      // Without hosts: the Slurm allocation's nodes (srun; whether there is one is known only at launch).
      if (o->hosts.empty() && o->hostfile.empty() && o->backend == Backend::kMpirun) {
        FailParse("--nnodes MIN:MAX: an elastic host set needs --hosts or --hostfile (mpirun over ssh)" +
                  FixedNodesHint(o->elastic_min, o->elastic_max));
      }
      if (o->backend == Backend::kSrun && !(o->hosts.empty() && o->hostfile.empty())) {
        FailParse("--nnodes MIN:MAX --backend srun: the allocation is the host set; drop --hosts/--hostfile");
      }
      if (o->node_rank >= 0) FailParse("--nnodes MIN:MAX: not with --node-rank (per-node start is not elastic)");
    }
    const bool per_node = o->node_rank >= 0 || !o->master_addr.empty() || o->master_port > 0;
    if (per_node) {
      if (o->node_rank < 0) FailParse("--master-addr/--master-port: per-node start also needs --node-rank R");
      if (o->nnodes == 0) FailParse("--node-rank: per-node start needs --nnodes N (the number of nodes)");
      if (o->node_rank >= o->nnodes) {
        FailParse("--node-rank " + std::to_string(o->node_rank) + ": expected 0.." + std::to_string(o->nnodes - 1) +
                  " (--nnodes " + std::to_string(o->nnodes) + ")");
      }
      if (o->master_addr.empty() && o->nnodes > 1)
        FailParse("--node-rank: more than one node needs --master-addr HOST");
      if (!o->hosts.empty() || !o->hostfile.empty()) {
        FailParse("--node-rank: per-node start runs only this node's workers; --hosts/--hostfile are for mpirun");
      }
      if (o->backend != Backend::kAuto)
        FailParse("--node-rank: per-node start uses no process manager; drop --backend");
      if (!o->backend_args.empty()) FailParse("--node-rank: per-node start runs no mpirun; drop --mpirun-arg");
    }
  });
  return app;
}

Status ParseLaunchArgs(const std::vector<std::string>& args, LaunchOptions* out, std::string* help_text) {
  std::vector<std::string> words = {"launch"};
  words.insert(words.end(), args.begin(), args.end());
  ParseResult r;
  const Status st = ParseWithCli([out](CLI::App* root) { AddLaunchCommand(root, out); }, words, &r);
  out->help = r.help;
  if (help_text != nullptr) *help_text = r.help_text;
  return st;
}

}  // namespace dtrain::launcher
