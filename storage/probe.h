#pragma once
// ProbeStorage: a preflight of a checkpoint or data store, run once before training (rank 0) so that a
// wrong bucket, wrong credentials or a read-only directory fail the run at its start with one clear
// message, instead of at the first checkpoint save minutes or hours later.
//
// Steps, in order (the first failure is returned, its message starting "storage preflight of <url>:"):
//   1. list   List(prefix): the bucket/directory exists and the credentials are accepted.
//             s3: NoSuchBucket -> NotFound ("bucket 'b' does not exist at <endpoint>");
//             SignatureDoesNotMatch / InvalidAccessKeyId -> InvalidArgument naming the variable to
//             check; AccessDenied -> InvalidArgument ("access denied"): configuration errors (exit 2).
//   2. write  Put(prefix + ".dtrain-probe-<random hex>", 64 bytes): "not writable: ..." with the
//             store's own code (file: IoError with errno's text; s3: InvalidArgument for a 403).
//   3. read   Get of that object: the same bytes came back (DataLoss otherwise).
//   4. delete Delete of that object: "cannot delete ..." (checkpoint retention deletes old steps).
// Steps 2-4 run only when `need_write` (checkpoints); a data URL, read only, is probed with step 1.
// The probe object is deleted on every path after a successful write (best effort after a failed read).
// `prefix` is a key prefix inside the store ("" = its root, "run1/" = below run1/); it must be "" or a
// valid key prefix (storage.h). Retries are the store's own (S3: storage/s3_retry.h), so a throttled
// but healthy bucket passes. Thread-safe as the store is; writes and deletes one object.

#include <string>

#include "core/status.h"
#include "storage/storage.h"

namespace dtrain::storage {

Status ProbeStorage(Storage* store, const std::string& prefix, bool need_write = true);

}  // namespace dtrain::storage
