#pragma once
// Self-checking files: a payload (e.g. a serialized manifest) behind a 12-byte header that carries the
// CRC32C of the payload, so a flipped bit or a cut anywhere in the file is DataLoss naming the file.
//
// Layout: 8 bytes kSealMagic ("\0dtSEAL1"), 4 bytes CRC32C of the payload (little-endian), payload.
// The magic starts with a 0 byte, which no protobuf message can start with (field number 0 is
// invalid), so a file written before sealing existed (a bare serialized message) is told apart
// unambiguously: Unseal returns it whole with *legacy = true.
// Thread-safe: pure functions.

#include <string>

#include "core/status.h"

namespace dtrain {

inline constexpr char kSealMagic[8] = {'\0', 'd', 't', 'S', 'E', 'A', 'L', '1'};
inline constexpr size_t kSealHeaderBytes = 12;

// magic + CRC32C(payload) + payload.
std::string Seal(const std::string& payload);

// The payload of `bytes` read from `name` (named in every message). OK with *legacy = false when the
// header's CRC32C matches; OK with *legacy = true and *payload = bytes when `bytes` has no header (an
// old file; the caller warns). DataLoss when the header is damaged (magic off by a few bits), cut
// short, or the payload's CRC32C differs from the header's.
Status Unseal(const std::string& name, const std::string& bytes, std::string* payload, bool* legacy);

// True the first time this process asks about `name`: readers warn once per legacy file, not once per read (a
// dataset's manifest is read by every loader of every rank). The one piece of process-wide state here: a
// mutex-guarded set of names. Thread-safe.
bool FirstLegacyWarning(const std::string& name);

}  // namespace dtrain
