#include "data/sample_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dtrain::data {

Status SampleLog::Create(const std::string& path, std::unique_ptr<SampleLog>* out) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("sample log: cannot create '" + path + "': " + std::strerror(errno));
  out->reset(new SampleLog(fd, path));  // private constructor
  return Status::OK();
}

SampleLog::~SampleLog() { close(fd_); }

Status SampleLog::Append(int64_t epoch, int64_t position, const std::vector<int64_t>& indices, int64_t num_real) {
  std::string line = std::to_string(epoch) + " " + std::to_string(position) + " " + std::to_string(num_real);
  for (int64_t i = 0; i < num_real && i < static_cast<int64_t>(indices.size()); ++i) {
    line += " " + std::to_string(indices[static_cast<size_t>(i)]);
  }
  line += "\n";
  // One write: a line is in the file whole or not at all, even when the process is killed right after.
  const ssize_t n = write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) {
    return Status::IoError("sample log '" + path_ + "': write failed: " + (n < 0 ? std::strerror(errno) : "short"));
  }
  return Status::OK();
}

}  // namespace dtrain::data
