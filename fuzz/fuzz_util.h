#pragma once
// Helpers shared by the libFuzzer targets in fuzz/ (one target per parser of untrusted input).
//
// A target returns 0 for every input it handles; a broken property calls DT_FUZZ_ASSERT, which prints
// what broke and traps, so libFuzzer saves the input as crash-<sha1> (scripts/fuzz.sh keeps it).
// Parsers that read files get the input through a scratch file: ScratchPath() names a file in a
// per-process directory (on /dev/shm when there is one, so the writes stay in memory), removed at exit.
// Single-threaded, like libFuzzer's calls into a target.

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#define DT_FUZZ_ASSERT(cond, what)                                                             \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                                 \
      __builtin_trap();                                                                        \
    }                                                                                          \
  } while (0)

namespace dtrain::fuzz {

class Scratch {
 public:
  Scratch() {
    const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    std::string templ = std::string(base) + "/dtrain-fuzz-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      std::perror("mkdtemp");
      __builtin_trap();
    }
    dir_ = templ;
  }
  ~Scratch() {
    for (const std::string& name : names_) ::unlink((dir_ + "/" + name).c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }
  // "<dir>/<name>"; the file (and "<name>.tmp", which atomic writers leave on failure) is removed at exit.
  std::string Path(const std::string& name) {
    names_.insert(name);
    names_.insert(name + ".tmp");
    return dir_ + "/" + name;
  }
  // Writes `size` bytes to Path(name) and returns that path.
  std::string Write(const std::string& name, const uint8_t* data, size_t size) {
    const std::string path = Path(name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    DT_FUZZ_ASSERT(out.good(), "cannot write scratch file " + path);
    return path;
  }

 private:
  std::string dir_;
  std::set<std::string> names_;
};

// The process's scratch directory (made on first use, removed when the process exits normally).
inline Scratch& ScratchDir() {
  static Scratch scratch;
  return scratch;
}

}  // namespace dtrain::fuzz
