#pragma once
// cuBLAS and cuBLASLt, loaded on first use (dlopen) instead of at process start. Include only where
// DT_HAVE_CUDA is 1.
//
// Why: loading libcublasLt costs ~0.65 s of CPU and ~25,000 page faults at every start of a process linked with it
// (its static initialisers: a C `int main() {}` linked with -lcublasLt, CUDA 13.0 on the 2-core CI machine; with
// -lcudart, -lnccl or -lcudnn alone it starts in < 0.02 s), and most dtrain processes never run a GEMM on a GPU:
// `dtrain launch`, each rank's `rank-exec`, CPU workers, every `ckpt`/`data`/`config` command, each test binary.
// So dtrain does not link cuBLAS. A call is written DT_CUBLAS(fn)(args...): the first call resolves `fn` in the
// toolkit's library of the major version dtrain was built against (libcublasLt.so.13 for cublasLt* names,
// libcublas.so.13 for the others; found as the dynamic linker finds a library: RUNPATH, LD_LIBRARY_PATH,
// ld.so.cache, then the toolkit's library directory of the build), later calls go straight to it.
//
// Contract: DT_CUBLAS(fn) has exactly the type decltype(&fn) (macros such as cublasCreate -> cublasCreate_v2 are
// followed). When the library cannot be loaded or lacks `fn`, the error is logged once (the file and dlerror's
// text) and the call returns CUBLAS_STATUS_NOT_INITIALIZED (a null pointer / zero for the few functions that
// return no status), so the caller's DT_CUBLAS_CHECK reports it as any other cuBLAS failure. Thread-safe.

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>
#include <type_traits>

namespace dtrain::cublas_lazy {

// The address of the C function `name` in its library (cublasLt* names: libcublasLt, else libcublas), loading that
// library on first use; nullptr when it cannot be loaded or lacks `name` (logged once per library / name).
void* Symbol(const char* name);
// Why the library that holds `name` could not be loaded ("" when it is loaded or has not been tried).
std::string LoadError(const char* name);

template <typename F>
struct Fallback;
template <typename R, typename... A>
struct Fallback<R (*)(A...)> {
  static R Call(A...) {
    if constexpr (std::is_same_v<R, cublasStatus_t>) {
      return CUBLAS_STATUS_NOT_INITIALIZED;
    } else {
      return R{};
    }
  }
};

// `name` resolved as F, or a function of type F that fails as described above.
template <typename F>
F Resolve(const char* name) {
  void* p = Symbol(name);
  return p != nullptr ? reinterpret_cast<F>(p) : &Fallback<F>::Call;
}

}  // namespace dtrain::cublas_lazy

#define DT_CUBLAS_NAME_(fn) #fn
#define DT_CUBLAS_NAME(fn) DT_CUBLAS_NAME_(fn)  // expands cublas_v2.h's renames first
// For a name that C++ overloads (cublas_api.h adds inline overloads of a few, e.g. cublasGemmStridedBatchedEx with
// a cudaDataType compute type), DT_CUBLAS_AS(fn, type) names the C function by its type (a function type).
#define DT_CUBLAS_AS(fn, type)                                                                   \
  ([]() {                                                                                        \
    static const auto dt_cublas_fn_ = ::dtrain::cublas_lazy::Resolve<type*>(DT_CUBLAS_NAME(fn)); \
    return dt_cublas_fn_;                                                                        \
  }())
#define DT_CUBLAS(fn)                                                                                    \
  ([]() {                                                                                                \
    static const auto dt_cublas_fn_ = ::dtrain::cublas_lazy::Resolve<decltype(&fn)>(DT_CUBLAS_NAME(fn)); \
    return dt_cublas_fn_;                                                                                \
  }())
