#pragma once
// EventWriter: TensorBoard scalars in a TensorFlow event file (proto/tensorboard.proto), with no
// TensorFlow dependency.
//
// The file <dir>/events.out.tfevents.<unix seconds, 10 digits>.<host> is a sequence of TFRecords:
//   uint64 length (little-endian) | uint32 masked CRC32C of the 8 length bytes | data[length] |
//   uint32 masked CRC32C of data,
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (TensorFlow's crc32c::Mask) and data is a
// serialized Event. The first record of the file is Event{wall_time, file_version: "brain.Event:2"}.
// Every Add* writes one record and flushes it, so a killed run leaves a readable file and TensorBoard
// shows the scalars while the run goes on. The file is opened for append: a restart within the same
// second on the same host continues the same file (TensorBoard then purges the steps the restart
// recomputes, as it does for TensorFlow's own restarted runs).
//
// Thread-safe: Add* and Close may be called from any thread (one mutex per writer).

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

class EventWriter {
 public:
  // Creates `dir` (and its parents) when missing and opens a new event file in it, writing the
  // file_version record. IoError names the path on failure.
  static Status Create(const std::string& dir, std::unique_ptr<EventWriter>* out);

  // Closes the file; errors at close are logged.
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event{wall_time, step, summary{tag, simple_value}}. The value is stored as a float (TF's
  // simple_value). wall_time is Unix seconds (core/clock.h WallSeconds() for "now").
  Status AddScalar(const std::string& tag, int64_t step, double value, double wall_time);

  // Several scalars of one step in a single Event (one record, one flush).
  Status AddScalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);

  // Closes the file; later Add* calls return FailedPrecondition. Idempotent.
  Status Close();

  const std::string& path() const { return path_; }

 private:
  EventWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  Status WriteRecordLocked(const std::string& data);

  std::mutex mu_;
  std::FILE* f_ = nullptr;
  std::string path_;
};

// TensorFlow's masked CRC32C (see the file comment).
uint32_t MaskedCrc32c(const void* data, size_t n);

// One TFRecord: header, `data`, footer (see the file comment).
std::string FrameTfRecord(const std::string& data);

}  // namespace dtrain::runtime
