#pragma once
// Host lists for `dtrain launch`: `--hosts a:8,b:8` and Open MPI / DeepSpeed hostfiles.
//
// Hostfile grammar (a subset of Open MPI's, and DeepSpeed's whole format), one host per line:
//   # comment                      (a '#' starts a comment anywhere on a line)
//   node-a slots=8                 (slots = processes to start there)
//   node-b slots=8 max_slots=16    (max_slots is accepted and ignored)
//   node-c                         (no slots: take --nproc-per-node)
// Blank lines are skipped. Every error names "file:line". A host may appear once.
// Pure functions of their input (ParseHostfile also reads the file); thread-compatible.

#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::launcher {

struct HostSlots {
  std::string name;
  int slots = 0;  // 0: not given; filled from --nproc-per-node when the placement is resolved
};

// Parses "a:8,b:8" (a host without ":N" has slots 0). Errors are InvalidArgument naming `--hosts`.
Status ParseHostList(const std::string& text, std::vector<HostSlots>* out);

// Parses hostfile text; `origin` (a path) prefixes every error as "origin:line: ...".
Status ParseHostfileText(const std::string& text, const std::string& origin, std::vector<HostSlots>* out);

// Reads and parses the hostfile at `path`; NotFound when it cannot be read.
Status ParseHostfile(const std::string& path, std::vector<HostSlots>* out);

// Strict decimal parse of a positive int (no sign, no spaces, no trailing text, <= 1'000'000).
bool ParsePositiveInt(const std::string& text, int* out);

}  // namespace dtrain::launcher
