#pragma once
// The dtrain command line as a function: `dtrain launch|train|doctor|bench|ckpt|data|report|config|
// rank-exec|completion|version`. One CLI11 tree holds every subcommand's flags (each *_cmd.h adds its
// own; launcher/cli_parse.h), so `--help`/`-h` works on every (sub)command (exit 0) and every parse
// error is one "dtrain <command>: error: ..." line naming the flag (exit 2).
// launcher/cli/main.cc is `return dtrain::launcher::Main(argc, argv);`, and so is a program of your own
// that registers custom models first (runtime/train/model_factory.h, examples/custom_model/):
//
//   int main(int argc, char** argv) {
//     if (!dtrain::runtime::RegisterModel("my_mlp", &BuildMyMlp).ok()) return 1;
//     return dtrain::launcher::Main(argc, argv);
//   }
//
// `PROGRAM launch ...` then starts `PROGRAM train CONFIG` workers: the launcher re-executes its own
// binary (/proc/self/exe; DTRAIN_WORKER_BIN overrides), so the workers know the same models. On
// several nodes the program must exist at the same path on every host.
//
// A command's Status becomes its exit code by ExitCodeFor (launcher/exit_codes.h), as in `dtrain launch`: 0 done,
// 1 failure, 2 usage/config/data error, 75 preempted (checkpoint saved), 128+N killed by signal N.
// Errors of a command that ran are printed to stderr as one "dtrain: error: ..." line. argc/argv are
// handed to MPI_Init by `train` and `bench`, as the process got them. Call it once per process, from the main thread.

namespace dtrain::launcher {

int Main(int argc, char** argv);

}  // namespace dtrain::launcher
