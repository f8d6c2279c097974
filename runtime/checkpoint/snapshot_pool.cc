#include "runtime/checkpoint/snapshot_pool.h"

#include <chrono>

#include "core/check.h"

namespace dtrain::runtime {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::unique_ptr<SnapshotPool> SnapshotPool::Start(Layout layout, Allocator* alloc,
                                                  std::function<Status()> thread_init) {
  std::unique_ptr<SnapshotPool> pool(new SnapshotPool());
  SnapshotPool* p = pool.get();
  p->done_ = std::async(std::launch::async, [p, layout = std::move(layout), alloc, init = std::move(thread_init)] {
    const auto t0 = std::chrono::steady_clock::now();
    if (init) DT_RETURN_IF_ERROR(init());
    for (const auto& [name, numel] : layout) {
      Tensor t;
      DT_RETURN_IF_ERROR(Tensor::Empty({numel}, DType::kF32, alloc, &t).WithContext("snapshot buffer " + name));
      p->buffers_.emplace_back(name, std::move(t));
    }
    p->alloc_s_ = Since(t0);
    return Status::OK();
  });
  return pool;
}

SnapshotPool::~SnapshotPool() {
  if (done_.valid()) done_.wait();  // the allocating thread writes into *this
}

Status SnapshotPool::Take(Buffers* out, double* waited_s) {
  if (taken_) return Status::FailedPrecondition("the snapshot buffers were taken already");
  taken_ = true;
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = done_.get();
  *waited_s = Since(t0);
  if (!st.ok()) return st;
  *out = std::move(buffers_);
  return Status::OK();
}

}  // namespace dtrain::runtime
