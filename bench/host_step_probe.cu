// host_step_probe: what each host call of a graphed training step costs on this machine, one call type at a time.
// A step of the Fashion-MNIST MLP takes about 0.1 ms on an H200, so a dozen CUDA calls at a few microseconds each
// decide whether the GPU waits for the host; this tool says which ones cost what.
//
//   host_step_probe [fashion-mnist dir] [reps=20000]
//
// Each row is the host time of one call, averaged over `reps` calls queued in rounds of 100 (the device catches up
// between rounds, outside the timed part, so the stream's queue never fills). The loader rows run the real
// data::Loader on Fashion-MNIST's train split (batch 64, 4 readers, as configs/fashion_mnist_mlp.yaml) with nothing
// else on the GPU.
//
// Then the graphed step's host sequence (runtime/train/trainer.cc, GraphedStep) with the real loader, PhaseTimer and
// StagedArgs, and a graph of 40 spin kernels standing in for the model (20 and 80 us of device time): host time per
// part, the device step time and the data share the PhaseTimer reports. A tool: errors print and exit 1.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/convert.h"
#include "data/loader.h"
#include "runtime/observe/phase_timer.h"
#include "runtime/optim/staged_args.h"

namespace {

using dtrain::Status;

void Die(const std::string& what) {
  std::fprintf(stderr, "host_step_probe: %s\n", what.c_str());
  std::exit(1);
}
void Ok(const Status& st) {
  if (!st.ok()) Die(st.ToString());
}
void Ok(cudaError_t e) {
  if (e != cudaSuccess) Die(cudaGetErrorString(e));
}

__global__ void Nop() {}

// Busy for `ns` nanoseconds of the GPU's global timer.
__global__ void Spin(long long ns) {
  long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Mean host microseconds of `call` over `reps` calls (rounds of 100, synchronizing `stream` untimed between them).
double Time(cudaStream_t stream, int reps, const std::function<void()>& call) {
  constexpr int kRound = 100;
  double sec = 0;
  for (int done = 0; done < reps; done += kRound) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRound; ++i) call();
    sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Ok(cudaStreamSynchronize(stream));
  }
  return 1e6 * sec / (reps / kRound * kRound);
}

void Row(const char* what, double us) { std::printf("| %s | %.2f |\n", what, us); }

}  // namespace

int main(int argc, char** argv) {
  const std::string src = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20000;
  if (reps < 100) Die("reps must be >= 100");
  std::unique_ptr<dtrain::DeviceContext> ctx;
  Ok(dtrain::DeviceContext::CreateCuda(0, &ctx));
  cudaStream_t s = ctx->stream(), other;
  Ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t timing, plain;
  Ok(cudaEventCreate(&timing));
  Ok(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
  const size_t batch_bytes = 64 * 784 * sizeof(float);  // the MLP's input batch
  void *pinned, *dev_a, *dev_b;
  Ok(cudaMallocHost(&pinned, batch_bytes));
  Ok(cudaMalloc(&dev_a, batch_bytes));
  Ok(cudaMalloc(&dev_b, batch_bytes));

  // Graphs of 1 and 40 chained empty kernels (the MLP step is about 40 nodes).
  auto graph_of = [&](int kernels) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    Ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kernels; ++i) Nop<<<1, 32, 0, s>>>();
    Ok(cudaStreamEndCapture(s, &g));
    Ok(cudaGraphInstantiate(&exec, g, 0));
    Ok(cudaGraphDestroy(g));
    return exec;
  };
  cudaGraphExec_t g1 = graph_of(1), g40 = graph_of(40);

  std::printf("| call | host us per call |\n| --- | ---: |\n");
  Row("cudaEventRecord (timing event)", Time(s, reps, [&] { Ok(cudaEventRecord(timing, s)); }));
  Row("cudaEventRecord (cudaEventDisableTiming)", Time(s, reps, [&] { Ok(cudaEventRecord(plain, s)); }));
  Ok(cudaEventRecord(plain, other));
  Row("cudaStreamWaitEvent (event of another stream)", Time(s, reps, [&] { Ok(cudaStreamWaitEvent(s, plain, 0)); }));
  Row("cudaEventQuery (completed event)", Time(s, reps, [&] { Ok(cudaEventQuery(plain)); }));
  Row("cudaMemcpyAsync H2D 200 KB from pinned",
      Time(s, reps, [&] { Ok(cudaMemcpyAsync(dev_a, pinned, batch_bytes, cudaMemcpyHostToDevice, s)); }));
  Row("cudaMemcpyAsync D2D 200 KB",
      Time(s, reps, [&] { Ok(cudaMemcpyAsync(dev_b, dev_a, batch_bytes, cudaMemcpyDeviceToDevice, s)); }));
  Row("kernel launch <<<1, 32>>>", Time(s, reps, [&] { Nop<<<1, 32, 0, s>>>(); }));
  Row("cudaGraphLaunch, 1 kernel node", Time(s, reps, [&] { Ok(cudaGraphLaunch(g1, s)); }));
  Row("cudaGraphLaunch, 40 kernel nodes", Time(s, reps, [&] { Ok(cudaGraphLaunch(g40, s)); }));

  // The loader as the MLP's training loop calls it, with nothing else queued.
  const std::string shards = "/tmp/host_step_probe_shards";
  Ok(dtrain::data::ConvertFashionMnist(src, "train", shards, 10000, 0));
  dtrain::data::LoaderOptions lo;
  lo.dataset_dir = shards;
  std::unique_ptr<dtrain::data::Loader> loader;
  Ok(dtrain::data::Loader::Create(lo, ctx.get(), &loader));
  dtrain::data::Batch b;
  for (int i = 0; i < 200; ++i) Ok(loader->Next(&b));  // the readers get ahead
  const auto stats0 = loader->stats();
  const double next_us = Time(s, reps, [&] { Ok(loader->Next(&b)); });
  const auto stats1 = loader->stats();
  Row("data::Loader::Next (batch 64, 4 readers)", next_us);
  Row("  of which blocked waiting for a batch",
      1e6 * (stats1.wait_seconds - stats0.wait_seconds) / static_cast<double>(stats1.batches - stats0.batches));

  // The graphed step's host sequence.
  std::printf(
      "\n| model graph (40 spin kernels) | Switch(data) | Next | Switch(compute) | StageStep | launch | EndStep | "
      "host total | device step | data share |\n| --- |"
      " ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::unique_ptr<dtrain::runtime::StagedArgs> args;
  Ok(dtrain::runtime::StagedArgs::Create(*ctx, 64, &args));
  for (long long step_ns : {20000LL, 80000LL}) {
    cudaGraph_t g;
    cudaGraphExec_t model;
    Ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 40; ++i) Spin<<<1, 32, 0, s>>>(step_ns / 40);
    Ok(cudaStreamEndCapture(s, &g));
    Ok(cudaGraphInstantiate(&model, g, 0));
    Ok(cudaGraphDestroy(g));
    dtrain::runtime::PhaseTimer timer(*ctx, 2);
    constexpr int kSteps = 3000, kPart = 6;
    double part[kPart] = {}, phase_ms[2] = {};
    int64_t timed = 0;
    const double hp[4] = {1e-3, 0.9, 0.999, 0.01};
    for (int step = 0; step < kSteps; ++step) {
      std::chrono::steady_clock::time_point t[kPart + 1];
      t[0] = std::chrono::steady_clock::now();
      Ok(timer.Switch(0));
      t[1] = std::chrono::steady_clock::now();
      Ok(loader->Next(&b));
      t[2] = std::chrono::steady_clock::now();
      Ok(timer.Switch(1));
      t[3] = std::chrono::steady_clock::now();
      Ok(args->Stage(*ctx, hp, sizeof(hp)));
      t[4] = std::chrono::steady_clock::now();
      Ok(cudaGraphLaunch(model, s));
      t[5] = std::chrono::steady_clock::now();
      Ok(timer.EndStep());
      t[6] = std::chrono::steady_clock::now();
      if (step >= 100) {
        for (int p = 0; p < kPart; ++p) part[p] += std::chrono::duration<double>(t[p + 1] - t[p]).count();
      }
      if ((step + 1) % 100 == 0) {
        std::vector<double> ms;
        int64_t n = 0;
        Ok(timer.Take(&ms, &n));  // synchronizes, like the trainer's progress line
        if (step >= 100) {
          phase_ms[0] += ms[0];
          phase_ms[1] += ms[1];
          timed += n;
        }
      }
    }
    const double steps = kSteps - 100;
    double host = 0;
    std::printf("| %lld us |", step_ns / 1000);
    for (double p : part) {
      std::printf(" %.2f |", 1e6 * p / steps);
      host += 1e6 * p / steps;
    }
    const double dev_us = 1e3 * (phase_ms[0] + phase_ms[1]) / static_cast<double>(timed);
    std::printf(" %.2f | %.2f | %.1f%% |\n", host, dev_us, 100.0 * phase_ms[0] / (phase_ms[0] + phase_ms[1]));
    Ok(cudaGraphExecDestroy(model));
  }
  args.reset();
  loader.reset();
  Ok(cudaGraphExecDestroy(g1));
  Ok(cudaGraphExecDestroy(g40));
  Ok(cudaFree(dev_a));
  Ok(cudaFree(dev_b));
  Ok(cudaFreeHost(pinned));
  Ok(cudaEventDestroy(timing));
  Ok(cudaEventDestroy(plain));
  Ok(cudaStreamDestroy(other));
  return 0;
}
