#include "runtime/train/checkpoint_coordinator.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "core/check.h"
#include "core/clock.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "runtime/checkpoint/dtype_convert.h"
#include "runtime/checkpoint/preemption.h"
#include "runtime/checkpoint/resume_plan.h"
#include "runtime/checkpoint/store_owner.h"
#include "runtime/config/config.h"
#include "runtime/observe/metrics.h"
#include "runtime/train/master_halves.h"
#include "storage/config_options.h"
#include "storage/probe.h"
#include "storage/scheme.h"
#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {
namespace {

// The snapshot buffer of split masters' low halves (SnapshotLayout): joined into params.bin, not a file of its own.
constexpr char kMasterLowSnapshot[] = "(split masters' low halves)";

// Which run of the job this is, by the counters that apply: DTRAIN_RESTART_COUNT when `dtrain
// launch` started the workers (its restarts), SLURM_RESTART_COUNT inside a Slurm job (its requeues;
// Slurm sets it only from the first requeue on, so unset means 0). "" when neither applies.
std::string RestartCounts(const comm::DistEnv& env) {
  std::string out;
  if (env.launched) out = "DTRAIN_RESTART_COUNT=" + std::to_string(env.restart_count);
  if (env.slurm_job)
    out += std::string(out.empty() ? "" : ", ") + "SLURM_RESTART_COUNT=" + std::to_string(env.requeue_count);
  return out;
}

bool IsStepNumber(const std::string& s) {
  return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

void LogLockTakeover(const comm::DistEnv& env, const std::string& note) {
  if (note.empty()) return;
  if ((env.launched && env.restart_count > 0) || (env.slurm_job && env.requeue_count > 0)) {
    DT_LOG_INFO(kRuntime, "{} (the attempt before this restart: {})", note, RestartCounts(env));
  } else {
    DT_LOG_WARN(kRuntime, "{}", note);
  }
}

CheckpointCoordinator::CheckpointCoordinator(const CheckpointParts& parts)
    : parts_(parts), rank_(parts.env->rank), world_(parts.env->world_size) {}
CheckpointCoordinator::~CheckpointCoordinator() = default;

Status CheckpointCoordinator::Open(const CheckpointParts& parts, std::unique_ptr<CheckpointCoordinator>* out,
                                   ResumePoint* at) {
  out->reset();
  *at = ResumePoint();
  const auto& ck = parts.cfg->checkpoint();
  if (!ck.enabled()) return Status::OK();
  if (ck.resume() != "auto" && ck.resume() != "never" && !IsStepNumber(ck.resume())) {
    return Status::InvalidArgument("checkpoint.resume: expected auto, never or a step number, got '" + ck.resume() +
                                   "' (auto, the default, resumes from the newest valid checkpoint)");
  }
  std::unique_ptr<CheckpointCoordinator> c(new CheckpointCoordinator(parts));  // private constructor
  DT_RETURN_IF_ERROR(c->OpenStore());
  DT_RETURN_IF_ERROR(c->Resume(at));
  *out = std::move(c);
  return Status::OK();
}

Status CheckpointCoordinator::OpenStore() {
  const proto::Config& cfg = *parts_.cfg;
  const auto& ck = cfg.checkpoint();
  const std::string url = ck.url().empty() ? cfg.run().dir() + "/checkpoints" : ck.url();
  CheckpointOptions o;
  o.keep_last = ck.keep_last();
  o.keep_every = ck.keep_every();
  o.at_phase = [fault = parts_.fault, rank = rank_](CheckpointPhase phase, int64_t step) {
    return fault->AtCheckpointWrite(rank, step, phase);
  };
  const storage::StorageOptions so = storage::OptionsFromConfig(cfg.storage());
  const storage::Scheme* scheme = nullptr;
  DT_RETURN_IF_ERROR(storage::FindScheme(url, &scheme).WithContext("checkpoint.url"));
  transfer_ = scheme->transfer(so);  // s3: ranged GETs of part_size, parallel_parts at once
  o.restore_chunk_bytes = transfer_.chunk_bytes;
  o.restore_threads = transfer_.parallelism;
  DT_RETURN_IF_ERROR(CheckpointManager::Open(url, so, o, &ckpt_));
  // Storage preflight before the first step, not at the first save: rank 0 writes, reads back and deletes a probe
  // object (bucket, credentials, write access), and every rank learns the verdict.
  Status probe = rank_ == 0 ? storage::ProbeStorage(&ckpt_->store(), "") : Status::OK();
  // An object-store root has no file lock (the run directory's RunLock does not reach it): rank 0 takes its owner
  // object instead (runtime/checkpoint/store_owner.h), so two jobs never write one root.
  if (probe.ok() && rank_ == 0 && scheme->traits.needs_owner) {
    std::string took_over;
    probe = StoreOwner::Acquire(&ckpt_->store(), {}, &store_owner_, &took_over);
    if (probe.ok()) LogLockTakeover(*parts_.env, took_over);
  }
  // 0 passed, 1 failed, 2 failed on a configuration error (rejected credentials, a missing bucket): every rank then
  // fails with a configuration error too, so that no rank's exit invites `dtrain launch --max-restarts` to retry.
  const bool config_error = probe.code() == Status::Code::kInvalidArgument || probe.code() == Status::Code::kNotFound;
  std::vector<double> probe_failed = {probe.ok() ? 0.0 : config_error ? 2.0 : 1.0};
  DT_RETURN_IF_ERROR(AllReduceHost(&probe_failed, comm::ReduceOp::kMax));
  if (!probe.ok()) return probe;
  if (probe_failed[0] != 0) {
    const std::string msg = "the checkpoint storage preflight failed on rank 0: " + url;
    return probe_failed[0] == 2 ? Status::InvalidArgument(msg) : Status::FailedPrecondition(msg);
  }
  // SIGTERM from here on (SIGUSR1 since RunWorker's start: Preemption::InstallEarly): a stop is now a checkpoint.
  Preemption::InstallHandlers();
  if (rank_ == 0) writer_ = std::make_unique<CheckpointWriter>();
  return Status::OK();
}

Status CheckpointCoordinator::Resume(ResumePoint* at) {
  const auto& ck = parts_.cfg->checkpoint();
  const std::string& url = ckpt_->url();
  DeviceContext& ctx = *parts_.ctx;
  models::Model& model = *parts_.model;
  // Every rank reads the store itself (a shared file system or object storage); they must agree. The files go
  // straight into the parameters and the optimizer state (this rank's shards under ZeRO-1) chunk by chunk as they
  // are read: on a GPU through a few pinned staging buffers, on the CPU into the tensors themselves
  // (runtime/train/restore_sink.h).
  const double restore_t0 = MonotonicSeconds();
  // Sync point: the state's initialisation (queued on the compute stream) is done before the sink writes into it.
  DT_RETURN_IF_ERROR(ctx.Synchronize());
  const int64_t numel = model.params().numel();
  std::vector<StateSlice> slices;
  parts_.updater->StateSlices(&slices);
  // (bf16 params or state: the f32 files are narrowed chunk by chunk on their way, restore_sink.h; split masters are
  // split into the params and their low halves.)
  Tensor* low = nullptr;
  DT_RETURN_IF_ERROR(parts_.updater->MasterLow(&low));
  slices.push_back({"params.bin", numel, 0, numel, &model.params(), 0, low});
  std::unique_ptr<RestoreSink> sink;
  DT_RETURN_IF_ERROR(RestoreSink::Create(std::move(slices), ctx.is_cuda() ? ctx.device_index() : -1,
                                         ctx.pinned_allocator(), transfer_.chunk_bytes,
                                         static_cast<size_t>(transfer_.parallelism) + 2, &sink));
  ResumePlan plan;
  const Status planned = PlanResume(ckpt_.get(), {ck.resume(), ck.overwrite(), rank_ == 0, sink.get()}, &plan);
  DT_RETURN_IF_ERROR(sink->Finish());  // the copies of every load tried, failed ones too
  DT_RETURN_IF_ERROR(planned);
  // Rank 0's snapshot buffers for the saves, allocated in the background from here on (not during the reads: the
  // page-locking would compete with them; a save that comes first waits for it, and says so).
  if (rank_ == 0) StartSnapshotPool();
  const double read_s = MonotonicSeconds() - restore_t0;
  if (rank_ == 0 && !plan.note.empty()) DT_LOG_WARN(kRuntime, "{}", plan.note);
  ckpt_->set_run_id(plan.run_id);
  const LoadedCheckpoint& loaded = plan.loaded;
  const double found = plan.resume ? static_cast<double>(loaded.manifest.step()) : -1.0;
  std::vector<double> v = {found, -found};
  DT_RETURN_IF_ERROR(AllReduceHost(&v, comm::ReduceOp::kMax));
  if (v[0] != -v[1]) {
    return Status::FailedPrecondition("ranks found different checkpoints in " + url + " (newest step " +
                                      std::to_string(static_cast<int64_t>(v[0])) + " vs " +
                                      std::to_string(static_cast<int64_t>(-v[1])) +
                                      "): every rank must see the same storage (use a shared directory or s3://)");
  }
  if (!plan.resume) {
    if (sink->touched()) {
      // A load that failed verification had written chunks into the state: a fresh start begins from the initial
      // parameters and optimizer state again (a failed load restores nothing).
      DT_LOG_WARN(kRuntime,
                  "a checkpoint that failed to load had been copied in part: parameters initialised again, optimizer "
                  "state reset");
      at->reinit_state = true;
    }
    if (rank_ == 0) DT_LOG_INFO(kRuntime, "no checkpoint in {}: starting from step 0 (run {})", url, plan.run_id);
    return Status::OK();
  }
  const double copy_t0 = MonotonicSeconds();
  DT_RETURN_IF_ERROR(Restore(loaded, *sink, at));
  const double copy_s = MonotonicSeconds() - copy_t0;
  if (rank_ == 0) {
    // Restore time: list + manifest + every file read in chunks and CRC-checked (copied into the state meanwhile),
    // then what is left copied into the model (files without a place in the state: the model's buffers).
    const double restore_s = MonotonicSeconds() - restore_t0;
    uint64_t bytes = 0;
    for (const proto::CheckpointFile& f : loaded.manifest.files()) bytes += f.size();
    DT_LOG_INFO(kRuntime,
                "restored {}/{}: {:.1f} MiB in {:.3f} s ({:.0f} MiB/s): read and verified in {:.3f} s (copied into "
                "the parameters and optimizer state meanwhile), the rest copied in {:.3f} s",
                url, loaded.dir, bytes / 1048576.0, restore_s, bytes / 1048576.0 / std::max(restore_s, 1e-9), read_s,
                copy_s);
    // Written by Start, once the run's reporter exists (nothing is written to run.dir before the decisions).
    restore_record_ = std::make_unique<JsonLine>();
    restore_record_->Add("kind", std::string("restore"))
        .Add("step", loaded.manifest.step())
        .Add("time", WallSeconds())
        .Add("restore_s", restore_s)
        .Add("read_s", read_s)
        .Add("copy_s", copy_s)
        .Add("bytes", static_cast<int64_t>(bytes));
    const std::string counts = RestartCounts(*parts_.env);
    DT_LOG_INFO(kRuntime,
                "resumed from {}/{}: step {}, epoch {}, {} samples into the epoch (saved by {} rank(s), now {}){}", url,
                loaded.dir, at->step, loaded.manifest.data().epoch() + 1, loaded.manifest.data().samples_in_epoch(),
                loaded.manifest.world_size(), world_, counts.empty() ? "" : "; " + counts);
  }
  return Status::OK();
}

Status CheckpointCoordinator::Start(RunReporter* reporter) {
  reporter_ = reporter;
  if (!restore_record_) return Status::OK();
  const Status st = reporter_->Write(*restore_record_);
  restore_record_.reset();
  return st;
}

Status CheckpointCoordinator::Restore(const LoadedCheckpoint& ck, RestoreSink& sink, ResumePoint* at) {
  const proto::Config& cfg = *parts_.cfg;
  DeviceContext& ctx = *parts_.ctx;
  models::Model& model = *parts_.model;
  const proto::CheckpointManifest& m = ck.manifest;
  const std::map<std::string, Tensor> files = sink.Files();
  auto copy_in = [&](const std::string& name, Tensor* dst) -> Status {
    const auto it = files.find(name);
    if (it == files.end()) return Status::DataLoss(ck.dir + ": no " + name + " in the checkpoint");
    if (it->second.numel() != dst->numel()) {
      return Status::InvalidArgument(ck.dir + "/" + name + " holds " + std::to_string(it->second.numel()) +
                                     " values but this model has " + std::to_string(dst->numel()) +
                                     ": the checkpoint belongs to another model (its config is in the manifest)");
    }
    return CopyF32Into(ctx, it->second, dst);  // the files are f32; a bf16 dst is rounded to nearest even
  };
  Tensor* low = nullptr;  // split masters
  DT_RETURN_IF_ERROR(parts_.updater->MasterLow(&low));
  if (sink.in_place().count("params.bin") == 0) {
    const auto it = files.find("params.bin");
    if (low != nullptr && it != files.end() && it->second.numel() == model.params().numel()) {
      DT_RETURN_IF_ERROR(CopyF32IntoMasters(ctx, it->second, &model.params(), low));
    } else {
      DT_RETURN_IF_ERROR(copy_in("params.bin", &model.params()));
    }
  }
  // Checkpoints hold f32 values (dtype_convert.h); the manifest names the dtypes the saving run kept ("" = f32). A
  // resume into other dtypes converts (above for the params, in RestoreState for the state) and says so once.
  auto note = [&](const std::string& what, const std::string& saved, DType now, const char* key) {
    const std::string was = saved.empty() ? "f32" : saved, is = DTypeName(now);
    if (rank_ != 0 || was == is) return;
    DT_LOG_INFO(kRuntime, "{}: {} saved as {}, this run keeps {} in {} ({}): converted{}", ck.dir, what, was,
                what == "parameters" ? "them" : "it", is, key,
                is == "bf16" ? " (rounded to nearest even)" : " (exactly)");
  };
  note("parameters", m.param_dtype(), low != nullptr ? DType::kF32 : model.params().dtype(), "train.master_weights");
  note("optimizer state", m.state_dtype(), parts_.updater->options().state_dtype, "optim.state_dtype");
  // The optimizer state (saved full, by any strategy at any world size; in place unless it did not fit), its update
  // count and the loss scaler.
  DT_RETURN_IF_ERROR(parts_.updater->RestoreState(m, files, ck.dir, sink.in_place()));
  for (auto& [name, tensor] : model.buffers()) DT_RETURN_IF_ERROR(copy_in("buffer." + name + ".bin", tensor));
  DT_RETURN_IF_ERROR(ctx.Synchronize());  // the copies out of the sink's host buffers are done before it goes
  // The data position is global (seed, epoch, samples consumed in the epoch): the sampler continues
  // with exactly the samples not yet consumed, also at another world size or batch size.
  const auto& d = m.data();
  const int64_t global_batch = cfg.data().batch_size() * cfg.train().grad_accum_steps() * world_;
  if (rank_ == 0 && d.global_batch() != global_batch) {
    DT_LOG_WARN(kRuntime, "{}: global batch was {}, now {}: steps group samples differently than the saved run", ck.dir,
                d.global_batch(), global_batch);
  }
  if (rank_ == 0 && (d.seed() != cfg.train().seed() || d.shuffle() != cfg.data().shuffle())) {
    DT_LOG_WARN(kRuntime, "{}: saved with train.seed={} data.shuffle={}, now {} {}: the sample order differs", ck.dir,
                d.seed(), d.shuffle(), cfg.train().seed(), cfg.data().shuffle());
  }
  DT_RETURN_IF_ERROR(parts_.data->Restore({cfg.train().seed(), d.epoch(), d.samples_in_epoch()}).WithContext(ck.dir));
  at->resumed = true;
  at->step = m.step();
  at->config_yaml = m.config_yaml();
  at->samples_seen = d.samples_consumed();
  return Status::OK();
}

proto::CheckpointManifest CheckpointCoordinator::BuildManifest(const StepPoint& p) const {
  const proto::Config& cfg = *parts_.cfg;
  const LrSchedule& schedule = *parts_.schedule;
  const int64_t step = p.step;
  const data::SamplerState& pos = p.next;
  proto::CheckpointManifest m;
  m.set_format_version(1);
  m.set_step(step);
  m.set_world_size(world_);
  proto::LrScheduleState* lr = m.mutable_lr_schedule();
  lr->set_kind(cfg.schedule().kind());
  lr->set_base_lr(schedule.base_lr());
  lr->set_warmup_steps(schedule.warmup_steps());
  lr->set_total_steps(schedule.total_steps());
  lr->set_min_lr(schedule.min_lr());
  lr->set_next_lr(parts_.step_lr(step));
  proto::DataLoaderState* d = m.mutable_data();
  d->set_seed(pos.seed);
  d->set_shuffle(cfg.data().shuffle());
  d->set_epoch(pos.epoch);
  d->set_samples_in_epoch(pos.consumed);
  d->set_global_batch(cfg.data().batch_size() * cfg.train().grad_accum_steps() * world_);
  d->set_samples_consumed(p.samples_seen);
  for (const models::ParamInfo& info : parts_.model->param_infos()) {
    proto::ParamSlice* s = m.add_params();
    s->set_name(info.name);
    for (int64_t dim : info.shape) s->add_shape(dim);
    s->set_offset(info.offset);
    s->set_numel(info.numel);
  }
  // (Split masters are fp32 values: "f32".)
  m.set_param_dtype(DTypeName(parts_.updater->options().split_masters ? DType::kF32 : parts_.model->params().dtype()));
  m.set_config_yaml(ConfigToYaml(cfg));
  m.set_dtrain_version(DTRAIN_VERSION);
  m.set_created_unix_ms(static_cast<int64_t>(1e3 * WallSeconds()));
  return m;
}

Status CheckpointCoordinator::Save(const StepPoint& p, bool sync) {
  DeviceContext& ctx = *parts_.ctx;
  models::Model& model = *parts_.model;
  const int64_t step = p.step;
  // Every rank takes part in SaveState (ZeRO-1 gathers the optimizer state into rank 0's snapshot through it: a
  // collective); rank 0 saves. Params and buffers are on every rank.
  proto::CheckpointManifest built = BuildManifest(p);
  if (rank_ != 0) {
    // Bounded like a step's collectives: ZeRO-1's ranks wait here while rank 0 waits for its previous save. (Not on
    // rank 0, whose part may be a long host copy of an offloaded state with no peer to wait for.)
    comm::WatchdogScope armed(watchdog_, "step " + std::to_string(step) + " checkpoint (optimizer state gather)");
    DT_RETURN_IF_ERROR(parts_.updater->SaveState({}, &built));
    reporter_->OnCheckpoint(step);
    return Status::OK();
  }
  DT_NVTX_RANGE("checkpoint_snapshot");
  const double t0 = MonotonicSeconds();
  double waited = 0;
  // At most one save in flight: its snapshot buffers are reused, so wait for it (measured).
  Status prev = writer_->Wait(&waited);
  if (!prev.ok()) return prev.WithContext("the previous checkpoint save failed");
  double alloc_wait_s = 0;
  if (!snapshot_checked_) DT_RETURN_IF_ERROR(TakeSnapshotBuffers(SnapshotLayout(), &alloc_wait_s));
  // D2H on the compute stream: ordered after this step's update, before the next step's. The layout: params, the
  // optimizer state, the model's buffers. bf16 sources (params, optimizer state) land in the first half of their
  // f32 buffer; the write job widens them (the files are f32: runtime/checkpoint/dtype_convert.h).
  // Split masters' params (their bf16 high halves) are joined with their low halves instead.
  const bool join = parts_.updater->options().split_masters;
  std::vector<int64_t> widen;  // snapshot indices to widen
  auto destination = [&](size_t i, DType dtype, bool widened = true) {
    if (dtype != DType::kBF16) return snapshot_[i].second;
    if (widened) widen.push_back(static_cast<int64_t>(i));
    return Tensor::Wrap(snapshot_[i].second.data(), {snapshot_[i].second.numel()}, DType::kBF16, DeviceType::kCPU);
  };
  Tensor params_dst = destination(0, model.params().dtype(), !join);
  DT_RETURN_IF_ERROR(params_dst.CopyFrom(model.params(), ctx.stream()));
  const size_t n_state = parts_.updater->state_names().size();
  std::vector<Tensor> state_dst;
  std::vector<Tensor*> state_ptrs;
  for (size_t k = 0; k < n_state; ++k) state_dst.push_back(destination(1 + k, parts_.updater->options().state_dtype));
  for (Tensor& t : state_dst) state_ptrs.push_back(&t);
  DT_RETURN_IF_ERROR(parts_.updater->SaveState(state_ptrs, &built));
  // Split masters: their low halves into the snapshot's last buffer (no file), joined with the params by the job.
  if (join) {
    Tensor* low = nullptr;
    DT_RETURN_IF_ERROR(parts_.updater->MasterLow(&low));  // settled by SaveState with optim.offload
    DT_CHECK_ARG(low != nullptr, "split masters without their low halves");
    Tensor low_dst = Tensor::Wrap(snapshot_.back().second.data(), {low->numel()}, DType::kBF16, DeviceType::kCPU);
    DT_RETURN_IF_ERROR(low_dst.CopyFrom(*low, ctx.stream()));
  }
  reporter_->OnCheckpoint(step);
  size_t i = 1 + n_state;
  for (auto& [name, tensor] : model.buffers()) {
    Tensor dst = destination(i++, tensor->dtype());
    DT_RETURN_IF_ERROR(dst.CopyFrom(*tensor, ctx.stream()));
  }
#if DT_HAVE_CUDA
  if (ctx.is_cuda()) {
    if (!snapshot_done_) {
      snapshot_done_ = std::make_unique<CudaEvent>();
      DT_RETURN_IF_ERROR(CudaEvent::Create(snapshot_done_.get()));
    }
    DT_RETURN_IF_ERROR(snapshot_done_->Record(ctx.stream()));
  }
#endif
  auto job = [this, manifest = std::move(built), widen = std::move(widen), join]() -> Status {
#if DT_HAVE_CUDA
    if (parts_.ctx->is_cuda()) {
      DT_CUDA_CHECK(cudaSetDevice(parts_.ctx->device_index()));  // the writer thread's device
      DT_RETURN_IF_ERROR(snapshot_done_->Synchronize());         // sync point: the snapshot copies are done
    }
#endif
    // (After the snapshot copies: CPU copies are synchronous, CUDA ones waited for above.)
    for (int64_t i : widen) WidenBf16InPlace(snapshot_[i].second.data(), snapshot_[i].second.numel());
    if (join) {
      JoinMastersInPlace(snapshot_[0].second.data(), snapshot_.back().second.data<uint16_t>(),
                         snapshot_[0].second.numel());
    }
    const double w0 = MonotonicSeconds();
    std::vector<CheckpointBlob> blobs;
    uint64_t bytes = 0;
    for (const auto& [name, t] : snapshot_) {
      if (name == kMasterLowSnapshot) continue;  // joined into params.bin
      blobs.push_back({name, t.data<float>(), static_cast<size_t>(t.numel()) * sizeof(float), t.numel()});
      bytes += blobs.back().size;
    }
    const std::string what = "checkpoint step " + std::to_string(manifest.step()) + " to " + ckpt_->url();
    DT_RETURN_IF_ERROR(ckpt_->Save(manifest, blobs).WithContext(what));
    const double s = MonotonicSeconds() - w0;
    DT_LOG_INFO(kRuntime, "{}/{}: {:.1f} MiB written in {:.3f} s ({:.0f} MiB/s)", ckpt_->url(),
                CheckpointManager::StepDir(manifest.step()), bytes / 1048576.0, s,
                bytes / 1048576.0 / std::max(s, 1e-9));
    return Status::OK();
  };
  if (sync) {
    DT_RETURN_IF_ERROR(job());
  } else {
    DT_RETURN_IF_ERROR(writer_->Submit(std::move(job)));
  }
  const double stall_ms = 1e3 * (MonotonicSeconds() - t0), wait_ms = 1e3 * waited;
  stall_s_ += stall_ms / 1e3;
  DT_LOG_INFO(kRuntime, "checkpoint step {}: training stalled {:.2f} ms ({}; {:.2f} ms waiting for the previous save)",
              step, stall_ms, sync ? "synchronous save" : "snapshot, write in the background", wait_ms);
  if (alloc_wait_s > 0.5e-3) {
    DT_LOG_WARN(kRuntime,
                "checkpoint step {}: the save came before the snapshot buffers were allocated (in the background "
                "since the start): waited {:.1f} ms for them",
                step, 1e3 * alloc_wait_s);
  }
  return reporter_->Write(JsonLine()
                              .Add("kind", std::string("checkpoint"))
                              .Add("step", step)
                              .Add("time", WallSeconds())
                              .Add("stall_ms", stall_ms)
                              .Add("wait_ms", wait_ms)
                              .Add("alloc_wait_ms", 1e3 * alloc_wait_s)
                              .Add("async", static_cast<int64_t>(sync ? 0 : 1)));
}

SnapshotPool::Layout CheckpointCoordinator::SnapshotLayout() const {
  models::Model& model = *parts_.model;
  SnapshotPool::Layout layout = {{"params.bin", model.params().numel()}};
  for (const std::string& name : parts_.updater->state_names())
    layout.emplace_back(name + ".bin", model.params().numel());
  for (auto& [name, tensor] : model.buffers()) layout.emplace_back("buffer." + name + ".bin", tensor->numel());
  // Split masters: a buffer (of f32 elements) for their low halves, last.
  if (parts_.updater->options().split_masters)
    layout.emplace_back(kMasterLowSnapshot, (model.params().numel() + 1) / 2);
  return layout;
}

void CheckpointCoordinator::StartSnapshotPool() {
  DeviceContext& ctx = *parts_.ctx;
  std::function<Status()> init;
#if DT_HAVE_CUDA
  if (ctx.is_cuda()) {
    init = [device = ctx.device_index()]() -> Status {
      DT_CUDA_CHECK(cudaSetDevice(device));  // the pinned memory belongs to this rank's context
      return Status::OK();
    };
  }
#endif
  snapshot_pool_ = SnapshotPool::Start(SnapshotLayout(), ctx.pinned_allocator(), std::move(init));
}

Status CheckpointCoordinator::TakeSnapshotBuffers(const SnapshotPool::Layout& layout, double* alloc_wait_s) {
  if (snapshot_pool_) {
    const Status st = snapshot_pool_->Take(&snapshot_, alloc_wait_s);
    if (st.ok()) {
      DT_LOG_DEBUG(kRuntime, "snapshot buffers allocated in the background in {:.3f} s", snapshot_pool_->alloc_s());
    } else {
      DT_LOG_WARN(kRuntime, "background allocation of the snapshot buffers failed ({}): allocating now", st.message());
    }
    snapshot_pool_.reset();
  }
  // The pool's buffers serve if they lead with this layout.
  bool match = snapshot_.size() >= layout.size();
  for (size_t i = 0; match && i < layout.size(); ++i) {
    match = snapshot_[i].first == layout[i].first && snapshot_[i].second.numel() == layout[i].second;
  }
  snapshot_checked_ = true;
  if (match) {
    snapshot_.resize(layout.size());
    return Status::OK();
  }
  if (!snapshot_.empty()) DT_LOG_WARN(kRuntime, "the snapshot layout differs from the one foreseen: allocating now");
  snapshot_.clear();
  for (const auto& [name, numel] : layout) {
    Tensor t;
    DT_RETURN_IF_ERROR(Tensor::Empty({numel}, DType::kF32, parts_.ctx->pinned_allocator(), &t));
    snapshot_.emplace_back(name, t);
  }
  return Status::OK();
}

Status CheckpointCoordinator::AgreePreempted(int64_t step, std::string* why) {
  comm::WatchdogScope armed(watchdog_, "step " + std::to_string(step) + " preemption check (flag all-reduce)");
  std::vector<double> v = {static_cast<double>(Preemption::Requested()), reporter_->gpu_idle_stop() ? 1.0 : 0.0};
  DT_RETURN_IF_ERROR(AllReduceHost(&v, comm::ReduceOp::kMax));
  // (The MAX over the ranks: SIGINT, 2, only when no rank got SIGUSR1 or SIGTERM.)
  *why = v[0] == SIGINT ? "interrupted (SIGINT)"
         : v[0] > 0     ? "preemption signal received"
         : v[1] > 0     ? "a GPU was idle (run.gpu_idle_exit)"
                        : "";
  if (v[0] == SIGINT && rank_ == 0) {
    DT_LOG_WARN(kRuntime,
                "interrupted (SIGINT): saving a checkpoint of step {} and exiting with code 75 (a second Ctrl-C stops "
                "at once, without this checkpoint)",
                step);
  } else if (v[0] > 0 && rank_ == 0) {
    DT_LOG_WARN(kRuntime, "preemption signal {} ({}): saving a checkpoint and exiting with code 75",
                static_cast<int>(v[0]), strsignal(static_cast<int>(v[0])));
  } else if (v[1] > 0 && rank_ == 0) {
    DT_LOG_WARN(kRuntime,
                "a GPU has been idle for run.gpu_idle_s with run.gpu_idle_exit set: saving a checkpoint "
                "and exiting with code 75");
  }
  return Status::OK();
}

Status CheckpointCoordinator::AfterStep(const StepPoint& p) {
  if (store_owner_ && store_owner_->Due()) DT_RETURN_IF_ERROR(store_owner_->Refresh());  // the root's heartbeat
  const auto& ck = parts_.cfg->checkpoint();
  const bool periodic = ck.every_steps() > 0 && p.step % ck.every_steps() == 0;
  if (periodic) reporter_->ClearBar();  // the save logs a line
  // A signal during the last step changes nothing: the end-of-training save and exit 0 follow.
  std::string stop_why;
  if (p.step < p.total_steps) DT_RETURN_IF_ERROR(AgreePreempted(p.step, &stop_why));
  if (!stop_why.empty()) {
    DT_RETURN_IF_ERROR(Save(p, /*sync=*/true));
    // Peers wait until rank 0's checkpoint is durable: a rank exiting early makes mpirun end the job.
    if (parts_.host_comm != nullptr && world_ > 1) DT_RETURN_IF_ERROR(parts_.host_comm->Barrier());
    // The caller says how to resume (runtime/train/worker.h): it knows who started this worker.
    return Status::Preempted(stop_why + ": checkpoint of step " + std::to_string(p.step) + " saved in " + ckpt_->url());
  }
  if (periodic || (ck.at_end() && p.step == p.total_steps)) DT_RETURN_IF_ERROR(Save(p, /*sync=*/!ck.async()));
  return Status::OK();
}

Status CheckpointCoordinator::Finish() { return writer_ ? writer_->Wait() : Status::OK(); }

Status CheckpointCoordinator::AllReduceHost(std::vector<double>* values, comm::ReduceOp op) {
  if (parts_.host_comm == nullptr || world_ == 1) return Status::OK();
  Tensor t = Tensor::Wrap(values->data(), {static_cast<int64_t>(values->size())}, DType::kF64, DeviceType::kCPU);
  return parts_.host_comm->AllReduce(&t, op, nullptr);
}

}  // namespace dtrain::runtime
