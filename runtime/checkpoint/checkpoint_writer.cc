#include "runtime/checkpoint/checkpoint_writer.h"

#include <chrono>

namespace dtrain::runtime {

CheckpointWriter::CheckpointWriter() : thread_([this] { Loop(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !running_; });  // the save in flight completes
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || job_; });
    if (stop_) return;
    std::function<Status()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    Status st = job();
    lock.lock();
    result_ = st;
    running_ = false;
    cv_.notify_all();
  }
}

Status CheckpointWriter::Wait(double* waited_s) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !running_; });
  if (waited_s != nullptr) *waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Status st = result_;
  result_ = Status::OK();
  return st;
}

Status CheckpointWriter::Submit(std::function<Status()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_) return Status::FailedPrecondition("a checkpoint save is still in flight (Wait() first)");
    job_ = std::move(job);
    running_ = true;
  }
  cv_.notify_all();
  return Status::OK();
}

bool CheckpointWriter::busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

}  // namespace dtrain::runtime
