#pragma once
// CheckpointWriter: one background thread that runs checkpoint saves, at most one in flight.
//
// The trainer snapshots its state into host buffers it owns, then Submit()s a job that writes them
// and returns at once; training continues while the job runs. Before touching the snapshot buffers
// again the trainer calls Wait(), which blocks until the job in flight (if any) is done and returns
// its Status — so an error of an asynchronous save surfaces at the next save or at the end.
// Retries are the storage layer's business (storage/storage.h).
//
// Shutdown: the destructor waits for the job in flight and joins the thread, on every path (also
// when the trainer returns an error). Submit/Wait are for one owner thread; not thread-safe.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/status.h"

namespace dtrain::runtime {

class CheckpointWriter {
 public:
  CheckpointWriter();
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the job in flight, returns its Status (OK when none) and clears it. *waited_s (optional)
  // gets the seconds spent blocked.
  Status Wait(double* waited_s = nullptr);
  // Queues `job`. FailedPrecondition when a job is still in flight (call Wait() first).
  Status Submit(std::function<Status()> job);
  bool busy();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<Status()> job_;  // queued, not started
  bool running_ = false;         // a job is queued or running
  bool stop_ = false;
  Status result_;       // of the last finished job, until Wait() takes it
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace dtrain::runtime
