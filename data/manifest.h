#pragma once
// The dataset manifest (proto/shard.proto, docs/data_format.md): `<dir>/manifest.pb`, a binary
// DatasetManifest written last by DatasetWriter, sealed with the CRC32C of its own bytes (core/sealed_bytes.h).
// Thread-safe: no shared state.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "proto/shard.pb.h"

namespace dtrain::data {

inline constexpr char kManifestName[] = "manifest.pb";
inline constexpr char kManifestMagic[] = "dtrain.dataset";
inline constexpr uint32_t kManifestVersion = 1;

// "<dir>/manifest.pb".
std::string ManifestPath(const std::string& dir);

// Bytes of one record under `schema` (every record of a dataset has this size); 0 when the schema
// is invalid.
uint64_t RecordBytes(const proto::DatasetSchema& schema);

// Checks a manifest read from `path` (named in every message): magic, version (newer -> DataLoss),
// schema (kind, dims >= 1, labels/classes, token dtype), shard file names (plain names, no '/'),
// total_samples == sum of shard counts. DataLoss for anything wrong.
Status ValidateManifest(const std::string& path, const proto::DatasetManifest& m);

// Reads and validates `<dir>/manifest.pb`. NotFound when missing (the message says what a dataset
// directory holds); DataLoss naming the file when its checksum differs, it does not parse or fails
// ValidateManifest. A manifest written before sealing (no checksum) reads with a warning.
Status ReadManifest(const std::string& dir, proto::DatasetManifest* out);

// The manifest in `bytes` (read from `name`, named in every message): checksum, parse, ValidateManifest, as above.
Status ParseManifest(const std::string& name, const std::string& bytes, proto::DatasetManifest* out);

// Writes `<dir>/manifest.pb` sealed, atomically (temporary file, fsync, rename, fsync of the directory).
Status WriteManifest(const std::string& dir, const proto::DatasetManifest& m);

// Writes `path` atomically as above: readers see the old file, no file, or all of `data`.
Status WriteFileAtomic(const std::string& path, const void* data, size_t size);

}  // namespace dtrain::data
