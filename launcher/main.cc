// dtrain: the command-line entry point (the commands and the exit codes: launcher/cli/cli.h).

#include "launcher/cli/cli.h"

int main(int argc, char** argv) { return dtrain::launcher::Main(argc, argv); }
