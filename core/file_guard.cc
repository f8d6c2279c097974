#include "core/file_guard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace dtrain {
namespace {

// "is a directory, not a file" for a non-regular mode; "" for a regular file.
std::string NotRegular(mode_t mode) {
  if (S_ISREG(mode)) return "";
  const char* kind = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "not a regular file";
  return std::string("is ") + kind + ", not a regular file";
}

Status Errno(const std::string& path, const std::string& what, int err) {
  if (err == ENOENT) return Status::NotFound(what + " '" + path + "': no such file");
  return Status::IoError(what + " '" + path + "': " + std::strerror(err));
}

// `base` (resolved) joined with `tail` ("/a/../b"), whose components do not exist: "." and ".." taken lexically.
std::string Join(const std::string& base, const std::string& tail) {
  std::string out = base == "/" ? "" : base;
  size_t pos = 0;
  while (pos < tail.size()) {
    size_t end = tail.find('/', pos);
    if (end == std::string::npos) end = tail.size();
    const std::string part = tail.substr(pos, end - pos);
    if (part == "..") {
      const size_t slash = out.find_last_of('/');
      out = slash == std::string::npos ? "" : out.substr(0, slash);
    } else if (!part.empty() && part != ".") {
      out += "/" + part;
    }
    pos = end + 1;
  }
  return out.empty() ? "/" : out;
}

// realpath of `path`, or of its nearest existing ancestor with the rest appended.
std::string Resolve(const std::string& path) {
  std::string head = path.empty() ? "." : path, tail;
  for (;;) {
    char buf[PATH_MAX];
    if (::realpath(head.c_str(), buf) != nullptr) return Join(buf, tail);
    const size_t slash = head.find_last_of('/');
    if (slash == std::string::npos) {
      if (::realpath(".", buf) == nullptr) return path;
      return Join(buf, "/" + head + tail);
    }
    if (slash == 0) return Join("/", head + tail);  // "/x" with no /x: nothing left to resolve
    tail = head.substr(slash) + tail;
    head = head.substr(0, slash);
  }
}

}  // namespace

Status CheckRegularFile(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno(path, what, errno);
  const std::string why = NotRegular(st.st_mode);
  if (!why.empty()) return Status::InvalidArgument(what + " '" + path + "': " + why);
  return Status::OK();
}

Status ReadRegularFile(const std::string& path, const std::string& what, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    // A directory opens read-only on Linux; other kinds are caught by fstat below. ENXIO: a socket.
    if (err == ENXIO) return Status::InvalidArgument(what + " '" + path + "': " + NotRegular(S_IFSOCK));
    return Errno(path, what, err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Errno(path, what, err);
  }
  const std::string why = NotRegular(st.st_mode);
  if (!why.empty()) {
    ::close(fd);
    return Status::InvalidArgument(what + " '" + path + "': " + why);
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  out->clear();
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Errno(path, what, err);
    }
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::OK();
}

Status MoveAside(const std::string& path, std::string* moved_to) {
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string base = trimmed + ".replaced-" + stamp;
  std::string target = base;
  struct stat st;
  for (int n = 2; ::lstat(target.c_str(), &st) == 0; ++n) target = base + "-" + std::to_string(n);
  if (::rename(trimmed.c_str(), target.c_str()) != 0) {
    return Status::IoError("cannot move '" + trimmed + "' aside to '" + target + "': " + std::strerror(errno));
  }
  *moved_to = target;
  return Status::OK();
}

bool PathWithin(const std::string& path, const std::string& dir) {
  char buf[PATH_MAX];
  if (::realpath(dir.c_str(), buf) == nullptr) return false;
  const std::string d = buf;
  const std::string p = Resolve(path);
  if (d == "/") return true;
  return p == d || (p.size() > d.size() && p.compare(0, d.size(), d) == 0 && p[d.size()] == '/');
}

}  // namespace dtrain
