#pragma once
// Guards for the files a user names (configs, hostfiles, data shards, export targets):
//   ReadRegularFile   reads a whole file that must be a regular one: a FIFO named as the config used to block
//                     open() forever, a directory read as "shorter than 8 bytes";
//   CheckRegularFile  the same check without reading (for files another reader opens);
//   MoveAside         what --overwrite does with an existing path: renames it, never deletes it;
//   PathWithin        whether a path lies inside a directory, symlinks and ".." resolved.
// Thread-safe; they touch only the paths given.

#include <string>

#include "core/status.h"

namespace dtrain {

// NotFound "<what> '<path>': no such file" when it does not exist; InvalidArgument "<what> '<path>': is a
// directory, not a file" (or a FIFO, a socket, a device) when it is not a regular file (symlinks followed); IoError
// for other failures.
Status CheckRegularFile(const std::string& path, const std::string& what);

// Reads `path` into *out after the checks of CheckRegularFile, made on the opened descriptor (opened with
// O_NONBLOCK, so a FIFO never blocks).
Status ReadRegularFile(const std::string& path, const std::string& what, std::string* out);

// Renames `path` (a file or a directory) to "<path>.replaced-<UTC YYYYmmddTHHMMSS>" (with "-2", "-3"... when that
// exists) in its own directory; *moved_to gets the new path. IoError naming both paths when the rename fails.
Status MoveAside(const std::string& path, std::string* moved_to);

// True when `path` is `dir` or lies below it. Both are resolved (realpath); a path that does not exist yet is
// resolved through its nearest existing ancestor. False when `dir` does not exist.
bool PathWithin(const std::string& path, const std::string& dir);

}  // namespace dtrain
