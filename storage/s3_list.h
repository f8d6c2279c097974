#pragma once
// One page of an S3 ListObjectsV2 answer, parsed and checked before any of its keys reaches a caller.
// The server is not trusted: a listing decides which checkpoint a run resumes from and which objects
// retention deletes, so a key that could not have come from this store's own Put is an error naming
// that key, never silently skipped (a skip would hide a misbehaving server or proxy).

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"
#include "storage/storage.h"

namespace dtrain::storage::detail {

// S3's own limit on an object name, in bytes.
constexpr size_t kMaxS3KeyBytes = 1024;

struct ListPage {
  std::vector<ObjectInfo> objects;  // keys relative to the store (object name minus `strip`), page order
  bool truncated = false;           // <IsTruncated>true</IsTruncated>
  std::string next_token;           // <NextContinuationToken>, decoded; may be empty
};

// Parses the answer `xml` to a listing of the object names starting with `full_prefix`, in a store
// whose object names all start with `strip` (its prefix and '/', or "" for a whole bucket; `strip` is
// a prefix of `full_prefix`). At most `max_keys` <Contents> are read. Every <Contents> must hold a Key
// and a Size. IoError naming `what` and the key (non-printable bytes as \xHH) when:
//   - Key or Size is missing or does not decode as XML text (storage/s3_xml.h);
//   - Size is not a decimal number below 2^63;
//   - the key is longer than kMaxS3KeyBytes, or does not start with `full_prefix`;
//   - the key minus `strip` is not a valid storage key (storage/key_util.h: "..", ".", empty
//     segments, a leading '/', NUL or other control bytes).
// Exception: a "directory marker" (a key ending in '/' with Size 0, what S3 consoles create for
// folders) is no object in the flat key space and is left out.
Status ParseListPage(const std::string& xml, const std::string& what, const std::string& full_prefix,
                     const std::string& strip, size_t max_keys, ListPage* page);

// `s` with bytes outside printable ASCII as \xHH, cut to `max_bytes` of input (with "... (N bytes)").
std::string EscapeForMessage(const std::string& s, size_t max_bytes = 200);

}  // namespace dtrain::storage::detail
