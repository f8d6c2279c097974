#if DT_HAVE_CUDA
#include "core/cublas_lazy.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "core/logging.h"

namespace dtrain::cublas_lazy {
namespace {

#define DT_CUBLAS_STR_(x) #x
#define DT_CUBLAS_STR(x) DT_CUBLAS_STR_(x)

struct Library {
  explicit Library(const char* name) : soname(name) {}
  const char* soname;
  std::once_flag once;
  void* handle = nullptr;
  std::string error;
};

Library g_cublas("libcublas.so." DT_CUBLAS_STR(CUBLAS_VER_MAJOR));
Library g_cublas_lt("libcublasLt.so." DT_CUBLAS_STR(CUBLAS_VER_MAJOR));

Library& LibraryOf(const char* name) { return std::strncmp(name, "cublasLt", 8) == 0 ? g_cublas_lt : g_cublas; }

void Load(Library& lib) {
  std::call_once(lib.once, [&lib] {
    lib.handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) return;
    const char* e = dlerror();
    lib.error = std::string("cannot load ") + lib.soname + ": " + (e ? e : "unknown error");
#ifdef DT_CUDA_LIB_DIR
    const std::string path = std::string(DT_CUDA_LIB_DIR) + "/" + lib.soname;  // the build's toolkit
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) {
      lib.error.clear();
      return;
    }
    e = dlerror();
    lib.error += std::string("; nor ") + path + ": " + (e ? e : "unknown error");
#endif
    DT_LOG_ERROR(kCore,
                 "{} (every cuBLAS call fails with CUBLAS_STATUS_NOT_INITIALIZED; is the CUDA toolkit's library "
                 "directory on LD_LIBRARY_PATH?)",
                 lib.error);
  });
}

}  // namespace

void* Symbol(const char* name) {
  Library& lib = LibraryOf(name);
  Load(lib);
  if (lib.handle == nullptr) return nullptr;
  void* p = dlsym(lib.handle, name);
  if (p == nullptr) DT_LOG_ERROR(kCore, "{} has no symbol {}", lib.soname, name);
  return p;
}

std::string LoadError(const char* name) {
  Library& lib = LibraryOf(name);
  Load(lib);
  return lib.error;
}

}  // namespace dtrain::cublas_lazy
#endif  // DT_HAVE_CUDA
