#pragma once
// Storage schemes: every URL scheme that Storage::Open accepts (file://, s3://) is one record, a Scheme, listed once
// in the table of storage/scheme.cc and found by the URL's scheme. Code outside storage/ never compares a URL
// prefix: it asks the record (is the store remote, does a checkpoint root need an owner object, how to split a
// big read) or the queries below.
//
// Adding a scheme (e.g. gs://): write its backend, storage/<name>_storage.{h,cc} (a Storage subclass and its
// `extern const Scheme k<Name>Scheme` record: open, traits, transfer plan), add `&k<Name>Scheme` to the table in
// storage/scheme.cc, and test it in tests/storage/. Its options go in StorageOptions (storage.h) and, for users,
// in the `storage` section of proto/config.proto (read by storage/config_options.cc).
//
// URLs: "<name>://rest"; a string without "://" is a local path (the file scheme). An unknown scheme is
// InvalidArgument naming the URL (credentials redacted: RedactUrl) and the known schemes.
// Thread-safety: the table is constant; every function is stateless and thread-safe.

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "storage/storage.h"

namespace dtrain::storage {

// What the code around a store decides by.
struct SchemeTraits {
  // Reached over the network, not a directory of this host: a dataset in it is fetched into the local shard cache
  // (data/remote_cache.h) before training, and nothing in it can be read as a local file (LocalDir is false).
  bool remote = false;
  // One job per checkpoint root: rank 0 takes the root's owner (runtime/checkpoint/store_owner.h: a file lock for
  // a local directory, an owner object with a heartbeat for an object store) before it reads the root. The run
  // directory's lock does not reach a root given by checkpoint.url. False only for a scheme whose stores cannot be
  // shared between jobs.
  bool needs_owner = false;
};

// How the reads of one big object are split: chunks of chunk_bytes, `parallelism` of them in flight (a checkpoint
// restore's chunks and threads).
struct TransferPlan {
  uint64_t chunk_bytes = 0;
  int parallelism = 1;
};

// One scheme. Records are constants defined by their backends; the table holds pointers to them.
struct Scheme {
  const char* name;      // "s3": its URLs start with "s3://"
  const char* url_form;  // "s3://bucket/prefix", for help and error messages
  SchemeTraits traits;
  // Opens the store at `url` (a URL of this scheme; for file, also a plain path).
  Status (*open)(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out);
  // The preferred transfer plan of a store opened with `opts`.
  TransferPlan (*transfer)(const StorageOptions& opts);
  // The local directory a URL of this scheme names; nullptr for remote schemes.
  bool (*local_dir)(const std::string& url, std::string* dir);
};

// The scheme of `url` (a string without "://" is a file path). InvalidArgument for an unknown or empty scheme:
// "storage URL 'gs://b/x': unknown scheme 'gs' (known: file:///abs/dir or a path, s3://bucket/prefix)".
Status FindScheme(const std::string& url, const Scheme** out);

// The local directory `url` names (file:///abs/dir -> /abs/dir, a plain path -> itself): true, or false for a
// remote or unknown scheme.
bool LocalDir(const std::string& url, std::string* dir);

// The URL forms of every known scheme, for help texts: "file:///abs/dir or a path, s3://bucket/prefix".
std::string KnownSchemes();

// `url` fit for messages and logs: user information ("s3://key:secret@bucket" -> "s3://<redacted>@bucket") and a
// query string ("?X-Amz-Signature=..." -> "?<redacted>") are replaced.
std::string RedactUrl(const std::string& url);

}  // namespace dtrain::storage
