#include "runtime/train/memory_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "kernels/optim_update.h"
#include "models/model_spec.h"
#include "runtime/optim/offloaded_state.h"
#include "runtime/optim/optim_algorithm.h"
#include "runtime/optim/parameter_updater.h"
#include "runtime/train/model_factory.h"
#include "runtime/train/step_graph.h"

namespace dtrain::runtime {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

// optim.offload auto on a plan that fits with all of the state offloaded (out->plan): none when the state fits the
// limit on the GPU too, else cpu keeping on the GPU what the limit leaves less kAutoKeepMarginPerMille of the limit.
// Writes the choice into *cfg, its plan into out->plan and the line saying so into out->offload.
constexpr int64_t kAutoKeepMarginPerMille = 20;

Status ResolveAutoOffload(proto::Config* cfg, const models::MemoryPlanInputs& in, MemoryFit* out) {
  proto::OptimConfig* o = cfg->mutable_optim();
  if (out->limit == 0) {
    o->set_offload(out->planned ? "none" : "cpu");
    out->offload = out->planned ? "optim.offload auto: none (no memory limit here to fit; a GPU run's workers check "
                                  "their GPU)"
                                : "optim.offload auto: cpu, all of the state (the model has no memory plan to size a "
                                  "kept part from)";
    return Status::OK();
  }
  models::MemoryPlanInputs on_gpu = in;
  on_gpu.offload_state = false;
  models::MemoryPlan p;
  DT_RETURN_IF_ERROR(PlanRunMemory(*cfg, on_gpu, &p));
  if (p.total() <= out->limit) {
    o->set_offload("none");
    out->plan = p;
    out->offload = "optim.offload auto: none (the optimizer state fits within " + out->limit_what + ")";
    return Status::OK();
  }
  const int64_t state = p.optimizer_state, granule = int64_t{2} << 20;
  const int64_t room = out->limit - out->limit * kAutoKeepMarginPerMille / 1000 - out->plan.total();
  const int64_t keep = std::max<int64_t>(0, std::min(room, state) / granule * granule);
  o->set_offload("cpu");
  o->set_offload_keep_gib(std::ldexp(static_cast<double>(keep), -30));
  models::MemoryPlanInputs kept = in;
  kept.offload_keep_bytes = keep;
  DT_RETURN_IF_ERROR(PlanRunMemory(*cfg, kept, &out->plan));
  out->offload = "optim.offload auto: cpu, " + models::FormatBytes(keep) + " of the " + models::FormatBytes(state) +
                 " optimizer state kept on the device (optim.offload_keep_gib " + Num(o->offload_keep_gib()) +
                 "), the rest in host memory";
  return Status::OK();
}

// The FLOPs a GPU does in the time PCIe moves a byte each way at once: ~625 TFLOP/s in a Llama-3-8B step over
// 50.8 GB/s each way measured on an H200 (bench/results/2026-12-04-llama-offload-keep-h200.md); an H100 or an A100
// on its PCIe generation is within 2x of it.
constexpr double kFlopsPerPcieByte = 1.25e4;

// A resolved optim.offload auto plan's cost in FLOPs: what `recompute` (ActivationPolicy::recompute) of the step's
// 6 x parameters x `tokens` recomputes, and the streamed optimizer state (copied in and out at once each update).
double AutoOffloadCost(const proto::Config& cfg, const models::MemoryPlan& plan, double recompute, int64_t tokens) {
  const double step = 6.0 * static_cast<double>(plan.num_params) * static_cast<double>(tokens);
  double streamed = 0;
  if (cfg.optim().offload() == "cpu") {
    streamed = std::max(0.0, static_cast<double>(plan.host_state) - std::ldexp(cfg.optim().offload_keep_gib(), 30));
  }
  return recompute * step + streamed * kFlopsPerPcieByte;
}

// The inputs' dtypes, as the config's keys set them.
void SetDTypesOf(const proto::Config& cfg, models::MemoryPlanInputs* in) {
  in->split_masters = cfg.train().master_weights() == "split";
  in->master_dtype = models::Bf16Params(cfg.train()) ? DType::kBF16 : DType::kF32;
  in->grad_dtype = cfg.train().gradients() == "bf16" ? DType::kBF16 : DType::kF32;
  in->optim_state_dtype = cfg.optim().state_dtype() == "bf16" ? DType::kBF16 : DType::kF32;
}

}  // namespace

Status MemoryPlanInputsOf(const proto::Config& cfg, int world_size, bool cuda, models::MemoryPlanInputs* in) {
  const OptimAlgorithmSpec* optim = FindOptimAlgorithm(cfg.optim().name());
  if (optim == nullptr) return Status::InvalidArgument("optim.name '" + cfg.optim().name() + "' is unknown");
  *in = models::MemoryPlanInputs();
  in->cuda = cuda;
  in->world_size = std::max(world_size, 1);
  in->zero1 = cfg.dist().zero1();
  in->optim_state_tensors = static_cast<int64_t>(optim->state_names.size());
  SetDTypesOf(cfg, in);
  // auto before FitMemory resolves it: planned as all of the state offloaded (what OptimizerOptionsFromConfig does)
  in->offload_state = cfg.optim().offload() == "cpu" || cfg.optim().offload() == "auto";
  in->offload_keep_bytes = OptimizerOptionsFromConfig(cfg.optim()).offload_keep_bytes;
  if (cfg.optim().offload() != "cpu" && cfg.optim().offload_keep_gib() > 0) {
    return Status::InvalidArgument("optim.offload_keep_gib " + Num(cfg.optim().offload_keep_gib()) +
                                   ": only with optim.offload cpu (it is " + cfg.optim().offload() +
                                   "; auto sets it itself)");
  }
  return Status::OK();
}

Status PlanRunMemory(const proto::Config& cfg, const models::MemoryPlanInputs& in, models::MemoryPlan* plan) {
  const models::ModelSpec* spec = nullptr;
  DT_RETURN_IF_ERROR(FindModelSpec(cfg, &spec));
  if (!spec->memory_plan) return Status::Unimplemented("model.kind " + cfg.model().kind() + " has no memory plan");
  DT_RETURN_IF_ERROR(spec->memory_plan(cfg, in, plan));
  // The optimizer (runtime/optim/optimizer.cc, zero1.cc): one tensor per state name over this rank's parameters, the
  // clipping scalars and the staged update constants.
  const int64_t p = plan->num_params, world = in.world_size;
  const int64_t shard = in.zero1 ? (p + world - 1) / world : p;
  // Offloaded (optim.offload cpu, runtime/optim/offloaded_state.h): the GPU holds the kept part and a ring of chunks
  // of the rest of each state tensor (no ring on the CPU, which updates the host state in place), the host the state
  // (page-locked, 64-byte granules).
  const std::vector<DType> dtypes =
      OptimizerStateDTypes(static_cast<size_t>(in.optim_state_tensors), in.optim_state_dtype, in.split_masters);
  const int64_t keep = OffloadedState::KeepNumel(in.offload_keep_bytes, dtypes, shard);
  const int64_t ring = in.cuda ? OffloadedState::RingNumel(shard - keep, 0) : 0;
  auto state_bytes = [&](int64_t numel) {
    int64_t bytes = 0;
    for (DType d : dtypes) bytes += numel > 0 ? in.Bytes(numel, d) : 0;
    return bytes;
  };
  plan->optimizer_state = (in.offload_state ? state_bytes(keep) + state_bytes(ring) : state_bytes(shard)) +
                          3 * in.Bytes(1, DType::kF32) + in.Round(ops::kStagedArgsBytes);
  plan->host_state = 0;
  if (in.offload_state) {
    for (DType d : dtypes) plan->host_state += CpuAllocator::RoundSize(static_cast<size_t>(shard) * DTypeSize(d));
  }
  if (world > 1 && cfg.dist().bf16_compress() && in.grad_dtype == DType::kF32) {
    plan->comm = in.Bytes(p, DType::kBF16);  // the reducer's wire buffer (bf16 gradients are their own)
  }
  plan->workspace += in.Bytes(1, DType::kF32);  // the trainer's loss accumulator
  if (in.cuda) {  // the cuBLASLt workspace (core/cuda_handles.cc; cudaMalloc'ed, outside the caching allocator)
    plan->workspace += int64_t{32} << 20;
    plan->outside_allocator += int64_t{32} << 20;
  }
  // Input batches on the run's allocator (runtime/train/data_source.cc): the device buffers the step reads (CUDA),
  // and synthetic_tokens' 8 distinct batches beside them (CPU too). The loaders' host slots are pinned memory.
  if (spec->tokens) {
    const int64_t b = cfg.data().batch_size(), t = spec->tokens(cfg).seq_len;
    const int64_t buffers = 2 * std::min<int64_t>(cfg.train().grad_accum_steps(), StepGraph::kMaxAccum);
    const int64_t batch = 2 * in.Bytes(b * t, DType::kI32);  // inputs and targets
    if (cfg.data().dataset() == "synthetic_tokens") {
      plan->data = (8 + buffers) * batch;
    } else if (in.cuda) {
      plan->data = buffers * batch;
    }
  }
  return Status::OK();
}

Status FitMemory(proto::Config* cfg, int world_size, bool cuda, int64_t gpu_bytes, MemoryFit* out) {
  *out = MemoryFit();
  const models::ModelSpec* spec = nullptr;
  if (!FindModelSpec(*cfg, &spec).ok()) return Status::OK();  // the run check names an unknown kind
  const double budget = cfg->train().memory_budget_gib();
  if (!spec->memory_plan) {
    if (budget <= 0) return cfg->optim().offload() == "auto" ? ResolveAutoOffload(cfg, {}, out) : Status::OK();
    return Status::InvalidArgument("train.memory_budget_gib " + Num(budget) + ": model.kind " + cfg->model().kind() +
                                   " has no memory plan (ModelSpec::memory_plan) to check it against; set it to 0");
  }
  models::MemoryPlanInputs in;
  DT_RETURN_IF_ERROR(MemoryPlanInputsOf(*cfg, world_size, cuda, &in));
  // A plan that fits: optim.offload auto resolved against it (and the limit).
  auto fits = [&]() { return cfg->optim().offload() == "auto" ? ResolveAutoOffload(cfg, in, out) : Status::OK(); };
  out->planned = true;
  const int64_t gpu_limit = cuda && gpu_bytes > 0 ? gpu_bytes - kCudaReservedBytes : 0;
  const std::string gpu_what = "the GPU's " + models::FormatBytes(gpu_bytes) + " less " +
                               models::FormatBytes(kCudaReservedBytes) + " for the CUDA context";
  if (budget > 0) {
    out->limit = static_cast<int64_t>(budget * kGiB);
    out->limit_what = "train.memory_budget_gib " + Num(budget);
    if (gpu_limit > 0 && out->limit > gpu_limit) {  // a budget written for a larger GPU: this one is the limit
      out->limit = gpu_limit;
      out->limit_what += ", capped at " + gpu_what;
    }
  } else if (gpu_limit > 0) {
    out->limit = gpu_limit;
    out->limit_what = gpu_what;
  }
  bool open = false;
  std::vector<models::ActivationPolicy> policies;
  if (spec->activation_policies) policies = spec->activation_policies(*cfg, &open);
  proto::Config planned = *cfg;  // the config of out->plan
  if (budget > 0 && open && !policies.empty()) {
    // The cheapest policy that fits; if none does, the plan of the last (least memory) one for the message. With
    // optim.offload auto, of those that fit the one of least recompute + PCIe time (AutoOffloadCost).
    const bool weigh = cfg->optim().offload() == "auto" && spec->tokens;
    double best_cost = 0;
    proto::Config best_cfg;
    MemoryFit best;
    for (const models::ActivationPolicy& p : policies) {
      planned = *cfg;
      p.apply(&planned);
      DT_RETURN_IF_ERROR(PlanRunMemory(planned, in, &out->plan));
      if (out->plan.total() > out->limit) continue;
      if (!weigh) {
        *cfg = planned;
        out->chosen = p.name;
        return fits();
      }
      MemoryFit trial = *out;
      trial.chosen = p.name;
      DT_RETURN_IF_ERROR(ResolveAutoOffload(&planned, in, &trial));
      const int64_t tokens = planned.data().batch_size() * spec->tokens(planned).seq_len;
      const double cost = AutoOffloadCost(planned, trial.plan, p.recompute, tokens);
      if (best.chosen.empty() || cost < best_cost) {
        best_cost = cost;
        best_cfg = planned;
        best = trial;
      }
    }
    if (!best.chosen.empty()) {
      *cfg = best_cfg;
      *out = best;
      out->offload += " (of the checkpointing policies that fit, the least recompute + PCIe time)";
      return Status::OK();
    }
  } else {
    const Status st = PlanRunMemory(*cfg, in, &out->plan);
    if (st.code() == Status::Code::kUnimplemented && budget <= 0) {  // a configuration the model does not plan
      out->planned = false;
      out->limit = 0;
      return fits();
    }
    if (st.code() == Status::Code::kUnimplemented) {
      return Status::InvalidArgument("train.memory_budget_gib " + Num(budget) + ": " + st.message() + "; set it to 0");
    }
    DT_RETURN_IF_ERROR(st);
  }
  if (out->limit == 0 || out->plan.total() <= out->limit) return fits();

  // Over the limit: each knob that would help from the plan shown, with what it gives.
  std::string knobs;
  auto line = [&](const std::string& knob, int64_t total) {
    knobs += "\n  - " + knob + ": " + models::FormatBytes(total) + (total <= out->limit ? " (fits)" : " (still over)");
  };
  if (!(budget > 0 && open)) {  // policies the budget has not tried: the cheapest that fits (else the least memory)
    for (size_t i = 0; i < policies.size(); ++i) {
      proto::Config trial = *cfg;
      policies[i].apply(&trial);
      models::MemoryPlan p;
      if (!PlanRunMemory(trial, in, &p).ok()) break;
      if ((p.total() <= out->limit || i + 1 == policies.size()) && p.total() < out->plan.total()) {
        line("activation checkpointing " + policies[i].name + " (" + policies[i].setting + ")", p.total());
        break;
      }
    }
  }
  for (int64_t b = planned.data().batch_size() / 2; b >= 1; b /= 2) {
    proto::Config trial = planned;
    trial.mutable_data()->set_batch_size(b);
    models::MemoryPlan p;
    if (!PlanRunMemory(trial, in, &p).ok()) break;
    if (p.total() <= out->limit || b == 1) {
      line("data.batch_size " + std::to_string(b) + " (train.grad_accum_steps x" +
               std::to_string(planned.data().batch_size() / b) + " keeps the global batch)",
           p.total());
      break;
    }
  }
  if (spec->memory_knobs) {
    for (const models::MemoryKnob& k : spec->memory_knobs(planned)) {
      proto::Config trial = planned;
      k.apply(&trial);
      if (!CheckZeroOneStorage(trial.train(), in.world_size, in.zero1).ok()) continue;  // not here
      models::MemoryPlanInputs trial_in = in;  // a knob may set a dtype (train.gradients)
      SetDTypesOf(trial, &trial_in);
      models::MemoryPlan p;
      if (PlanRunMemory(trial, trial_in, &p).ok() && p.total() < out->plan.total()) line(k.setting, p.total());
    }
  }
  const OptimAlgorithmSpec* optim = FindOptimAlgorithm(planned.optim().name());
  if (optim != nullptr && optim->bf16_storage && in.optim_state_dtype == DType::kF32 && out->plan.optimizer_state > 0) {
    models::MemoryPlanInputs half = in;
    half.optim_state_dtype = DType::kBF16;
    models::MemoryPlan p;
    if (PlanRunMemory(planned, half, &p).ok()) line("optim.state_dtype bf16 (half the optimizer state)", p.total());
  }
  if (!in.offload_state && out->plan.optimizer_state > 0) {
    models::MemoryPlanInputs host = in;
    host.offload_state = true;
    models::MemoryPlan p;
    if (PlanRunMemory(planned, host, &p).ok()) {
      line("optim.offload cpu (optimizer state to " + models::FormatBytes(p.host_state) + " of host memory)",
           p.total());
    }
  }
  // (Not for bf16 gradients or 16-bit masters, which ZeRO-1 does not take.)
  if (out->plan.optimizer_state > 0 && CheckZeroOneStorage(planned.train(), 2, true).ok()) {
    for (int64_t w = std::max<int64_t>(2, 2 * in.world_size); w <= 1024; w *= 2) {
      models::MemoryPlanInputs more = in;
      more.zero1 = true;
      more.world_size = w;
      models::MemoryPlan p;
      if (!PlanRunMemory(planned, more, &p).ok()) break;
      if (p.total() <= out->limit) {  // named only when it fits: a small state cannot make up for the activations
        line("dist.zero1 on " + std::to_string(w) + " GPUs (optimizer state " + models::FormatBytes(p.optimizer_state) +
                 " per rank)",
             p.total());
        break;
      }
    }
  }
  return Status::InvalidArgument("memory plan " + models::FormatBytes(out->plan.total()) + " per rank exceeds " +
                                 out->limit_what + ":\n" + out->plan.Table() +
                                 (knobs.empty() ? "" : "\nEach of these alone would give:" + knobs));
}

Status CheckHostMemory(const proto::Config& cfg, const models::MemoryPlan& plan, int ranks, int64_t available) {
  const int64_t need = plan.host_state * std::max(ranks, 1);
  if (plan.host_state == 0 || available <= 0 || need <= available) return Status::OK();
  const std::string bf16 = cfg.optim().state_dtype() == "bf16" ? "" : "set optim.state_dtype bf16 (half the bytes), ";
  return Status::InvalidArgument("optim.offload cpu: the optimizer state takes " +
                                 models::FormatBytes(plan.host_state) + " of page-locked host memory per rank, " +
                                 models::FormatBytes(need) + " for the " + std::to_string(ranks) +
                                 " rank(s) on this machine, which has " + models::FormatBytes(available) +
                                 " available: " + bf16 + "run fewer ranks per machine, or set optim.offload none");
}

int64_t HostMemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string DescribeMemoryFit(const MemoryFit& fit) {
  if (!fit.planned) {
    return "memory plan: none (the model has no ModelSpec::memory_plan)" +
           (fit.offload.empty() ? "" : "; " + fit.offload);
  }
  std::string s = "memory plan " + models::FormatBytes(fit.plan.total()) + " per rank";
  if (!fit.chosen.empty()) s += ", activation checkpointing " + fit.chosen + " chosen to fit " + fit.limit_what;
  if (fit.chosen.empty() && fit.limit > 0) s += ", within " + fit.limit_what;
  return s + (fit.offload.empty() ? "" : "; " + fit.offload) + ":\n" + fit.plan.Table();
}

}  // namespace dtrain::runtime
