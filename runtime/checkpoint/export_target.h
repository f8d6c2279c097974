#pragma once
// Where `dtrain ckpt export --out PATH` may write (launcher/cli/ckpt_cmd.cc). Export never replaces a user's work
// without asking:
//   - a path inside the checkpoint store it reads (a file of the checkpoint itself, `latest`, a step directory), or
//     one that holds that store: always refused, --overwrite or not (the export would damage what it reads);
//   - a path inside another checkpoint store (a directory holding `.dtrain-owner`, or `latest` and a step
//     directory, or a step directory with its manifest.pb, at PATH or above it): refused unless `overwrite`;
//   - an existing PATH (a file; for --format hf a directory that is not empty): refused unless `overwrite`, which
//     moves it aside to "<PATH>.replaced-<UTC time>" (core/file_guard.h MoveAside), never deletes it.
// Refusals are InvalidArgument (exit 2) naming the path and what to do.
// Thread-safety: stateless; touches only the paths involved.

#include <string>

#include "core/status.h"

namespace dtrain::runtime {

struct ExportTarget {
  std::string out;         // --out
  std::string source_url;  // the checkpoint store read (file:// or a path; s3:// has no local files to protect)
  bool directory = false;  // --format hf: PATH is a directory
  bool overwrite = false;  // --overwrite
};

// Checks `t` and, with t.overwrite, moves an existing PATH aside; *note (optional) then says where it went ("" when
// nothing was moved). Call it after the checkpoint loaded and just before writing.
Status ClaimExportTarget(const ExportTarget& t, std::string* note = nullptr);

}  // namespace dtrain::runtime
