#include "runtime/checkpoint/file_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace dtrain::runtime {
namespace {

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

// mkdir -p; EEXIST on every level is fine.
int MakeDirs(const std::string& dir) {
  if (dir.empty() || dir == "/" || dir == ".") return 0;
  const auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    const int parent = MakeDirs(dir.substr(0, slash));
    if (parent != 0) return parent;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno;
  return 0;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[512];
  off_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n <= 0 || out.size() > 4096) break;
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

// The value of "key=value" in the holder line ("" when absent).
std::string Field(const std::string& line, const std::string& key) {
  const std::string k = key + "=";
  size_t pos = line.find(k);
  while (pos != std::string::npos && pos != 0 && line[pos - 1] != ' ') pos = line.find(k, pos + 1);
  if (pos == std::string::npos) return "";
  const size_t end = line.find(' ', pos);
  return line.substr(pos + k.size(), end == std::string::npos ? std::string::npos : end - pos - k.size());
}

std::string HolderLine() {
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "host=" + HostName() + " pid=" + std::to_string(::getpid()) + " started=" + when + "\n";
}

// F_OFD_SETLK on the whole file; F_SETLK where the kernel does not know OFD locks.
int TryLock(int fd) {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
#ifdef F_OFD_SETLK
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
  if (errno != EINVAL) return errno;
#endif
  return ::fcntl(fd, F_SETLK, &fl) == 0 ? 0 : errno;
}

}  // namespace

Status FileLock::Acquire(const Spec& spec, std::unique_ptr<FileLock>* out, std::string* note) {
  if (note != nullptr) note->clear();
  const std::string path = spec.dir + "/" + spec.file_name;
  const int mk = MakeDirs(spec.dir);
  if (mk != 0) return Status::IoError(spec.what + ": cannot create it: " + std::strerror(mk));
  std::string taken_over;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IoError(path + ": open: " + std::strerror(errno));
    const int err = TryLock(fd);
    if (err == 0) {
      // The file may have been replaced (a stale-lock takeover by another job) between open and lock.
      struct stat mine, now;
      if (::fstat(fd, &mine) != 0 || ::stat(path.c_str(), &now) != 0 || mine.st_ino != now.st_ino ||
          mine.st_dev != now.st_dev) {
        ::close(fd);
        continue;
      }
      const std::string previous = ReadAll(fd);
      if (taken_over.empty() && !previous.empty()) {
        taken_over = "took over the lock " + path + " of a job that ended without releasing it (" + previous +
                     "; the kernel dropped its lock)";
      }
      const std::string line = HolderLine();
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
        const int e = errno;
        ::close(fd);
        return Status::IoError(path + ": cannot write the holder: " + std::strerror(e));
      }
      (void)::fsync(fd);
      if (note != nullptr) *note = taken_over;
      out->reset(new FileLock(fd, path, spec.remove_on_release));  // private constructor
      return Status::OK();
    }
    if (err != EAGAIN && err != EACCES) {
      ::close(fd);
      return Status::IoError(path + ": fcntl lock: " + std::strerror(err));
    }
    const std::string holder = ReadAll(fd);
    ::close(fd);
    const std::string pid = Field(holder, "pid");
    if (Field(holder, "host") == HostName() && !pid.empty() &&
        pid.find_first_not_of("0123456789") == std::string::npos && pid.size() < 10 &&
        ::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) {
      // Held, but by no live process of the holder's pid on this host (e.g. an orphan inherited it): replace the file.
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return Status::IoError(path + ": cannot replace the stale lock: " + std::strerror(errno));
      }
      taken_over =
          "took over the lock " + path + " of pid " + pid + " on this host, which no longer exists (" + holder + ")";
      continue;
    }
    return Status::InvalidArgument(spec.what + " is in use by another dtrain job (" +
                                   (holder.empty() ? std::string("holder not written yet") : holder) + "; lock " +
                                   path + "): wait for it to end, or " + spec.remedy);
  }
  return Status::IoError(path + ": the lock file kept being replaced; giving up");
}

bool FileLock::StillAtPath() const {
  struct stat mine, now;
  return ::fstat(fd_, &mine) == 0 && ::stat(path_.c_str(), &now) == 0 && mine.st_ino == now.st_ino &&
         mine.st_dev == now.st_dev;
}

FileLock::~FileLock() {
  // Emptied (or removed) first, then unlocked: a file naming a holder whose lock is free means that holder died. A
  // process that opened the removed file and locks it after us sees that the path no longer names its inode and
  // opens it again (Acquire's check).
  if (remove_ && StillAtPath()) {  // never another holder's file that now lives at our old path
    (void)::unlink(path_.c_str());
  } else {
    (void)::ftruncate(fd_, 0);
    if (restore_times_) (void)::futimens(fd_, times_);  // still locked: no other holder's write is undone
  }
  ::close(fd_);
}

void FileLock::RestoreTimesOnRelease(const struct timespec (&times)[2]) {
  restore_times_ = true;
  times_[0] = times[0];
  times_[1] = times[1];
}

}  // namespace dtrain::runtime
