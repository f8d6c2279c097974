#include "runtime/observe/tensorboard.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/logging.h"
#include "proto/tensorboard.pb.h"

namespace dtrain::runtime {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;  // tensorflow/core/lib/hash/crc32c.h

void PutFixed32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutFixed64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string FrameTfRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutFixed64(data.size(), &out);
  PutFixed32(MaskedCrc32c(out.data(), 8), &out);
  out += data;
  PutFixed32(MaskedCrc32c(data.data(), data.size()), &out);
  return out;
}

Status EventWriter::Create(const std::string& dir, std::unique_ptr<EventWriter>* out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create TensorBoard directory '" + dir + "': " + ec.message());
  const double now = WallSeconds();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010lld", static_cast<long long>(now));
  const std::string path = dir + "/events.out.tfevents." + stamp + "." + log::Hostname();
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) return Status::IoError("cannot open event file '" + path + "': " + std::strerror(errno));
  std::unique_ptr<EventWriter> w(new EventWriter(f, path));  // private constructor: no make_unique

  tensorboard::Event ev;
  ev.set_wall_time(now);
  ev.set_file_version("brain.Event:2");
  {
    std::lock_guard<std::mutex> lock(w->mu_);
    DT_RETURN_IF_ERROR(w->WriteRecordLocked(ev.SerializeAsString()));
  }
  *out = std::move(w);
  return Status::OK();
}

EventWriter::~EventWriter() {
  const Status st = Close();
  if (!st.ok()) DT_LOG_WARN(kRuntime, "{}", st.ToString());
}

Status EventWriter::AddScalar(const std::string& tag, int64_t step, double value, double wall_time) {
  return AddScalars(step, wall_time, {{tag, value}});
}

Status EventWriter::AddScalars(int64_t step, double wall_time,
                               const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event ev;
  ev.set_wall_time(wall_time);
  ev.set_step(step);
  for (const auto& [tag, value] : values) {
    DT_CHECK_ARG(!tag.empty(), "TensorBoard scalar with an empty tag at step " << step);
    tensorboard::Summary::Value* v = ev.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  std::lock_guard<std::mutex> lock(mu_);
  return WriteRecordLocked(ev.SerializeAsString());
}

Status EventWriter::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (f_ == nullptr) return Status::OK();
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) return Status::IoError("closing event file '" + path_ + "': " + std::strerror(errno));
  return Status::OK();
}

Status EventWriter::WriteRecordLocked(const std::string& data) {
  if (f_ == nullptr) return Status::FailedPrecondition("event file '" + path_ + "' is closed");
  const std::string rec = FrameTfRecord(data);
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size() || std::fflush(f_) != 0) {
    return Status::IoError("writing event file '" + path_ + "': " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
