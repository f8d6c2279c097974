#include "runtime/trainer.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "models/ops/matmul.h"
#include "models/ops/softmax_xent.h"
#include "runtime/config.h"
#include "runtime/core/check.h"
#include "runtime/core/nvtx.h"
#include "runtime/model_factory.h"
#include "runtime/safetensors.h"
#if DT_HAVE_CUDA
#include "runtime/core/cuda_handles.h"
#endif

namespace dtrain::runtime {
namespace {

double Now() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return Status::IoError("cannot create run directory '" + partial + "': " + std::strerror(errno));
      }
    }
    if (i < path.size()) partial += path[i];
  }
  return Status::OK();
}

}  // namespace

Trainer::Trainer(const proto::Config& cfg, DeviceContext& ctx) : cfg_(cfg), ctx_(ctx) {}
Trainer::~Trainer() = default;

Status Trainer::Create(const proto::Config& cfg, DeviceContext& ctx, comm::Communicator* grad_comm,
                       comm::Communicator* host_comm, int rank, int world, std::unique_ptr<Trainer>* out) {
  std::unique_ptr<Trainer> t(new Trainer(cfg, ctx));  // private constructor
  t->grad_comm_ = grad_comm;
  t->host_comm_ = host_comm;
  t->rank_ = rank;
  t->world_ = world;
  DT_RETURN_IF_ERROR(t->Setup());
  *out = std::move(t);
  return Status::OK();
}

Status Trainer::Setup() {
  const auto& d = cfg_.data();
  DT_RETURN_IF_ERROR(data::LoadFashionMnist(d.dir(), /*train=*/true, d.limit_train(), &train_));
  if (cfg_.train().eval()) DT_RETURN_IF_ERROR(data::LoadFashionMnist(d.dir(), /*train=*/false, d.limit_test(), &test_));
  const int64_t sample_dim = train_.rows * train_.cols;
  if (cfg_.model().kind() == "mlp" && cfg_.model().mlp().input_dim() != sample_dim) {
    return Status::InvalidArgument("model.mlp.input_dim is " + std::to_string(cfg_.model().mlp().input_dim()) +
                                   " but the dataset's samples have " + std::to_string(sample_dim) + " values");
  }
  // Training drops the incomplete last global batch so every step has the same shape on every rank.
  sampler_ = std::make_unique<data::BatchSampler>(train_.n, d.batch_size(), cfg_.train().seed(), d.shuffle(),
                                                  /*drop_last=*/true, rank_, world_);
  DT_RETURN_IF_ERROR(sampler_->Validate());
  DT_RETURN_IF_ERROR(FaultInjector::FromEnv(&fault_));
  const int64_t accum = cfg_.train().grad_accum_steps();
  const int64_t steps_per_epoch = sampler_->num_batches() / accum;
  if (steps_per_epoch == 0) {
    return Status::InvalidArgument("data.batch_size x train.grad_accum_steps x world size (" +
                                   std::to_string(d.batch_size() * accum * world_) + ") exceeds the " +
                                   std::to_string(train_.n) + " training samples: no full step fits in an epoch");
  }
  total_steps_ = cfg_.train().epochs() * steps_per_epoch;
  if (cfg_.train().max_steps() > 0) total_steps_ = std::min(total_steps_, cfg_.train().max_steps());

  DT_RETURN_IF_ERROR(BuildModel(cfg_.model(), ctx_, &model_));
  DT_RETURN_IF_ERROR(model_->InitParams(cfg_.train().seed()));

  const auto& o = cfg_.optim();
  OptimizerOptions oo;
  oo.name = o.name();
  oo.lr = o.lr();
  oo.momentum = o.momentum();
  oo.nesterov = o.nesterov();
  oo.beta1 = o.beta1();
  oo.beta2 = o.beta2();
  oo.eps = o.eps();
  oo.weight_decay = o.weight_decay();
  oo.grad_clip = o.grad_clip();
  DT_RETURN_IF_ERROR(Optimizer::Create(ctx_, oo, model_->params().numel(), &optimizer_));
  const auto& s = cfg_.schedule();
  DT_RETURN_IF_ERROR(
      LrSchedule::Create(s.kind(), o.lr(), s.warmup_steps(), total_steps_, s.min_lr_ratio(), &schedule_));

  if (grad_comm_ != nullptr && world_ > 1) {
    GradientReducer::Options ro;
    ro.bucket_bytes = static_cast<size_t>(cfg_.dist().bucket_mb() * (1 << 20));
    ro.bf16_compress = cfg_.dist().bf16_compress();
    DT_RETURN_IF_ERROR(
        GradientReducer::Create(ctx_, grad_comm_, model_->param_infos(), &model_->grads(), ro, &reducer_));
  }

  // Staging: pinned host slots and device buffers sized for the larger of the train/eval batch.
  const int64_t rows = std::max(d.batch_size(), d.eval_batch_size());
  for (int i = 0; i < 2; ++i) {
    DT_RETURN_IF_ERROR(Tensor::Empty({rows, sample_dim}, DType::kF32, ctx_.pinned_allocator(), &pinned_x_[i]));
    DT_RETURN_IF_ERROR(Tensor::Empty({rows}, DType::kI32, ctx_.pinned_allocator(), &pinned_y_[i]));
#if DT_HAVE_CUDA
    if (ctx_.is_cuda()) {
      copy_done_[i] = std::make_unique<CudaEvent>();
      DT_RETURN_IF_ERROR(CudaEvent::Create(copy_done_[i].get()));
      DT_RETURN_IF_ERROR(copy_done_[i]->Record(ctx_.stream()));
    }
#endif
  }
  DT_RETURN_IF_ERROR(Tensor::Empty({rows, sample_dim}, DType::kF32, ctx_.allocator(), &dev_x_));
  DT_RETURN_IF_ERROR(Tensor::Empty({rows}, DType::kI32, ctx_.allocator(), &dev_y_));
  Tensor host_ones;
  DT_RETURN_IF_ERROR(Tensor::Empty({rows, 1}, DType::kF32, ctx_.host_allocator(), &host_ones));
  for (int64_t i = 0; i < rows; ++i) host_ones.data<float>()[i] = 1.0f;
  DT_RETURN_IF_ERROR(Tensor::Empty({rows, 1}, DType::kF32, ctx_.allocator(), &ones_));
  DT_RETURN_IF_ERROR(ones_.CopyFrom(host_ones, ctx_.stream()));
  DT_RETURN_IF_ERROR(Tensor::Empty({1, 1}, DType::kF32, ctx_.allocator(), &loss_acc_));
  DT_RETURN_IF_ERROR(loss_acc_.SetZero(ctx_.stream()));
  DT_RETURN_IF_ERROR(ctx_.Synchronize());  // host_ones is pageable and goes away here

  if (rank_ == 0) {
    DT_RETURN_IF_ERROR(MakeDirs(cfg_.run().dir()));
    std::ofstream(cfg_.run().dir() + "/config.yaml") << ConfigToYaml(cfg_);
    DT_RETURN_IF_ERROR(metrics_.Open(cfg_.run().dir() + "/metrics.jsonl"));
  }
  DT_LOG_INFO(kRuntime, "model {}: {} parameters in {} tensors; {} steps ({} per epoch), global batch {}",
              cfg_.model().kind(), model_->params().numel(), model_->param_infos().size(), total_steps_,
              steps_per_epoch, d.batch_size() * accum * world_);
  return SetupCheckpoint();
}

Status Trainer::LoadBatch(const data::Split& split, const std::vector<int64_t>& idx, int slot, Tensor* x, Tensor* y) {
  DT_NVTX_RANGE("load_batch");
  const int64_t b = static_cast<int64_t>(idx.size());
  const int64_t dim = split.rows * split.cols;
#if DT_HAVE_CUDA
  // Sync point: the slot's previous H2D copy must be done before the host overwrites it.
  if (ctx_.is_cuda()) DT_RETURN_IF_ERROR(copy_done_[slot]->Synchronize());
#endif
  DT_RETURN_IF_ERROR(data::GatherBatch(split, idx, pinned_x_[slot].data<float>(), pinned_y_[slot].data<int32_t>()));
  Tensor px, py;
  DT_RETURN_IF_ERROR(pinned_x_[slot].View(0, {b, dim}, &px));
  DT_RETURN_IF_ERROR(pinned_y_[slot].View(0, {b}, &py));
  if (!ctx_.is_cuda()) {
    *x = px;
    *y = py;
    return Status::OK();
  }
  DT_RETURN_IF_ERROR(dev_x_.View(0, {b, dim}, x));
  DT_RETURN_IF_ERROR(dev_y_.View(0, {b}, y));
  DT_RETURN_IF_ERROR(x->CopyFrom(px, ctx_.stream()));
  DT_RETURN_IF_ERROR(y->CopyFrom(py, ctx_.stream()));
#if DT_HAVE_CUDA
  DT_RETURN_IF_ERROR(copy_done_[slot]->Record(ctx_.stream()));
#endif
  return Status::OK();
}

Status Trainer::TrainStep(int64_t step, int64_t* cursor, double* data_seconds) {
  DT_NVTX_RANGE("train_step");
  // Blocks on peers: MPI all-reduces in backward (CPU), batch-slot syncs behind NCCL work (GPU).
  comm::WatchdogScope armed(watchdog_, "step " + std::to_string(step + 1) + " (gradient all-reduce)");
  const int64_t accum = cfg_.train().grad_accum_steps();
  DT_RETURN_IF_ERROR(model_->grads().SetZero(ctx_.stream()));
  std::vector<int64_t> idx;
  for (int64_t m = 0; m < accum; ++m) {
    const double t0 = Now();
    sampler_->Batch((*cursor)++, &idx);
    Tensor x, y;
    DT_RETURN_IF_ERROR(LoadBatch(train_, idx, slot_, &x, &y));
    slot_ ^= 1;
    *data_seconds += Now() - t0;
    DT_RETURN_IF_ERROR(model_->Forward(x, y));
    // loss_acc += mean(losses) / accum, as a [1,B] x [B,1] product: stays on the device, no sync.
    const int64_t b = x.dim(0);
    Tensor losses_row, ones_col;
    DT_RETURN_IF_ERROR(model_->losses().Reshape({1, b}, &losses_row));
    DT_RETURN_IF_ERROR(ones_.View(0, {b, 1}, &ones_col));
    DT_RETURN_IF_ERROR(
        ops::Matmul(ctx_, losses_row, false, ones_col, false, &loss_acc_, 1.0f / static_cast<float>(b * accum), 1.0f));
    // Gradients are exchanged only on the last micro-batch; earlier ones just accumulate locally.
    const bool last = m + 1 == accum;
    models::GradReadyFn on_ready;
    if (reducer_ && last) on_ready = [this](int i) { return reducer_->MarkReady(i); };
    DT_RETURN_IF_ERROR(model_->Backward(1.0f / static_cast<float>(accum), on_ready));
  }
  if (reducer_) DT_RETURN_IF_ERROR(reducer_->Finalize());
  return optimizer_->Step(ctx_, model_->params(), model_->grads(), schedule_->LrAt(step));
}

Status Trainer::AllReduceHost(std::vector<double>* values, comm::ReduceOp op) {
  if (host_comm_ == nullptr || world_ == 1) return Status::OK();
  Tensor t = Tensor::Wrap(values->data(), {static_cast<int64_t>(values->size())}, DType::kF64, DeviceType::kCPU);
  return host_comm_->AllReduce(&t, op, nullptr);
}

Status Trainer::LogProgress(int64_t epoch, int64_t step, double interval_s, int64_t interval_steps, double data_s,
                            double* mean_loss) {
  comm::WatchdogScope armed(watchdog_, "step " + std::to_string(step) + " progress (device sync, loss all-reduce)");
  float acc = 0;
  Tensor host = Tensor::Wrap(&acc, {1, 1}, DType::kF32, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host.CopyFrom(loss_acc_, ctx_.stream()));
  DT_RETURN_IF_ERROR(ctx_.Synchronize());
  DT_RETURN_IF_ERROR(loss_acc_.SetZero(ctx_.stream()));
  std::vector<double> v = {acc / static_cast<double>(interval_steps)};
  DT_RETURN_IF_ERROR(AllReduceHost(&v));
  *mean_loss = v[0] / world_;
  if (!std::isfinite(*mean_loss)) {
    return Status::FailedPrecondition("training diverged: loss is " + std::to_string(*mean_loss) + " at step " +
                                      std::to_string(step) + " (lower optim.lr or set optim.grad_clip)");
  }
  double comm_ms = 0;  // exposed (non-overlapped) gradient communication per step
  if (reducer_) DT_RETURN_IF_ERROR(reducer_->TakeExposedCommMs(&comm_ms));
  if (rank_ != 0) return Status::OK();
  const double lr = schedule_->LrAt(step - 1);
  const int64_t global_batch = cfg_.data().batch_size() * cfg_.train().grad_accum_steps() * world_;
  const double samples_per_s = interval_steps * global_batch / interval_s;
  const double step_ms = 1e3 * interval_s / interval_steps, data_ms = 1e3 * data_s / interval_steps;
  DT_LOG_INFO(kRuntime,
              "epoch {}/{} step {}/{} | loss {:.4f} | lr {:.3e} | {:.0f} samples/s | step {:.2f} ms (data {:.2f} ms, "
              "exposed comm {:.2f} ms)",
              epoch + 1, cfg_.train().epochs(), step, total_steps_, *mean_loss, lr, samples_per_s, step_ms, data_ms,
              comm_ms);
  return metrics_.Write(JsonLine()
                            .Add("kind", std::string("train"))
                            .Add("epoch", epoch + 1)
                            .Add("step", step)
                            .Add("loss", *mean_loss)
                            .Add("lr", lr)
                            .Add("samples_per_s", samples_per_s)
                            .Add("step_ms", step_ms)
                            .Add("data_ms", data_ms)
                            .Add("comm_exposed_ms", comm_ms));
}

Status Trainer::Evaluate(double* loss, double* accuracy) {
  DT_NVTX_RANGE("evaluate");
  comm::WatchdogScope armed(watchdog_, "evaluation (device syncs, metric all-reduce)");
  // Each rank takes a contiguous shard of the test set; sums are combined across ranks.
  const int64_t begin = test_.n * rank_ / world_, end = test_.n * (rank_ + 1) / world_;
  const int64_t eb = cfg_.data().eval_batch_size();
  Tensor pred_dev, pred_host;
  DT_RETURN_IF_ERROR(Tensor::Empty({eb}, DType::kI32, ctx_.allocator(), &pred_dev));
  DT_RETURN_IF_ERROR(Tensor::Empty({eb}, DType::kI32, ctx_.host_allocator(), &pred_host));
  Tensor eval_acc;
  DT_RETURN_IF_ERROR(Tensor::Empty({1, 1}, DType::kF32, ctx_.allocator(), &eval_acc));
  DT_RETURN_IF_ERROR(eval_acc.SetZero(ctx_.stream()));
  double correct = 0;
  std::vector<int64_t> idx;
  for (int64_t start = begin; start < end; start += eb) {
    const int64_t b = std::min(eb, end - start);
    idx.resize(b);
    for (int64_t i = 0; i < b; ++i) idx[i] = start + i;
    Tensor x, y, losses_row, ones_col, pd, ph;
    DT_RETURN_IF_ERROR(LoadBatch(test_, idx, slot_, &x, &y));
    slot_ ^= 1;
    DT_RETURN_IF_ERROR(model_->Forward(x, y));
    DT_RETURN_IF_ERROR(model_->losses().Reshape({1, b}, &losses_row));
    DT_RETURN_IF_ERROR(ones_.View(0, {b, 1}, &ones_col));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, losses_row, false, ones_col, false, &eval_acc, 1.0f, 1.0f));
    DT_RETURN_IF_ERROR(pred_dev.View(0, {b}, &pd));
    DT_RETURN_IF_ERROR(pred_host.View(0, {b}, &ph));
    DT_RETURN_IF_ERROR(ops::Argmax(ctx_, model_->logits(), &pd));
    DT_RETURN_IF_ERROR(ph.CopyFrom(pd, ctx_.stream()));
    DT_RETURN_IF_ERROR(ctx_.Synchronize());
    for (int64_t i = 0; i < b; ++i) correct += ph.data<int32_t>()[i] == test_.labels[start + i];
  }
  float loss_sum = 0;
  Tensor host = Tensor::Wrap(&loss_sum, {1, 1}, DType::kF32, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host.CopyFrom(eval_acc, ctx_.stream()));
  DT_RETURN_IF_ERROR(ctx_.Synchronize());
  std::vector<double> v = {loss_sum, correct, static_cast<double>(end - begin)};
  DT_RETURN_IF_ERROR(AllReduceHost(&v));
  *loss = v[2] > 0 ? v[0] / v[2] : std::numeric_limits<double>::quiet_NaN();
  *accuracy = v[2] > 0 ? v[1] / v[2] : std::numeric_limits<double>::quiet_NaN();
  return Status::OK();
}

Status Trainer::Run(TrainSummary* summary) {
  const int64_t accum = cfg_.train().grad_accum_steps();
  const int64_t log_every = cfg_.train().log_every();
  const int64_t global_batch = cfg_.data().batch_size() * accum * world_;
  *summary = TrainSummary();
  summary->eval_loss = summary->eval_accuracy = std::numeric_limits<double>::quiet_NaN();
  const auto& ck = cfg_.checkpoint();
  int64_t step = start_step_;
  double train_seconds = 0;
  for (int64_t epoch = start_epoch_; epoch < cfg_.train().epochs() && step < total_steps_; ++epoch) {
    sampler_->SetEpoch(epoch);
    int64_t cursor = epoch == start_epoch_ ? start_cursor_ : 0;
    double t_interval = Now(), data_s = 0;
    int64_t interval_steps = 0;
    while (cursor + accum <= sampler_->num_batches() && step < total_steps_) {
      DT_RETURN_IF_ERROR(fault_.AtStep(rank_, step));
      DT_RETURN_IF_ERROR(TrainStep(step, &cursor, &data_s));
      ++step;
      ++interval_steps;
      if (step % log_every == 0 || step == total_steps_ || cursor + accum > sampler_->num_batches()) {
        // LogProgress synchronizes, so the interval's wall time covers all of its device work.
        DT_RETURN_IF_ERROR(
            LogProgress(epoch, step, Now() - t_interval, interval_steps, data_s, &summary->last_train_loss));
        train_seconds += Now() - t_interval;
        t_interval = Now();
        data_s = 0;
        interval_steps = 0;
      }
      if (ckpt_ == nullptr) continue;
      // A signal during the last step changes nothing: the end-of-training save and exit 0 follow.
      bool preempted = false;
      if (step < total_steps_) DT_RETURN_IF_ERROR(AgreePreempted(step, &preempted));
      if (preempted) {
        DT_RETURN_IF_ERROR(SaveCheckpoint(step, epoch, cursor, /*sync=*/true));
        // Peers wait until rank 0's checkpoint is durable: a rank exiting early makes mpirun end the job.
        if (host_comm_ != nullptr && world_ > 1) DT_RETURN_IF_ERROR(host_comm_->Barrier());
        return Status::Preempted("preemption signal received: checkpoint of step " + std::to_string(step) +
                                 " saved in " + ckpt_->url() + "; run the same command again to resume");
      }
      if ((ck.every_steps() > 0 && step % ck.every_steps() == 0) || (ck.at_end() && step == total_steps_)) {
        DT_RETURN_IF_ERROR(SaveCheckpoint(step, epoch, cursor, /*sync=*/!ck.async()));
      }
    }
    if (cfg_.train().eval()) {
      DT_RETURN_IF_ERROR(Evaluate(&summary->eval_loss, &summary->eval_accuracy));
      if (rank_ == 0) {
        DT_LOG_INFO(kRuntime, "epoch {}/{} eval | loss {:.4f} | accuracy {:.2f}%", epoch + 1, cfg_.train().epochs(),
                    summary->eval_loss, 100.0 * summary->eval_accuracy);
        DT_RETURN_IF_ERROR(metrics_.Write(JsonLine()
                                              .Add("kind", std::string("eval"))
                                              .Add("epoch", epoch + 1)
                                              .Add("step", step)
                                              .Add("eval_loss", summary->eval_loss)
                                              .Add("eval_accuracy", summary->eval_accuracy)));
      }
    }
  }
  if (writer_) DT_RETURN_IF_ERROR(writer_->Wait());  // the last asynchronous save is durable (or its error)
  summary->steps = step;
  summary->samples = step * global_batch;
  summary->seconds = train_seconds;
  summary->samples_per_s = train_seconds > 0 ? summary->samples / train_seconds : 0;
  if (rank_ == 0) DT_RETURN_IF_ERROR(ExportParams(cfg_.run().dir() + "/final.safetensors"));
  return Status::OK();
}

Status Trainer::ExportParams(const std::string& path) {
  std::vector<float> flat(model_->params().numel());
  Tensor host = Tensor::Wrap(flat.data(), {model_->params().numel()}, DType::kF32, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host.CopyFrom(model_->params(), ctx_.stream()));
  DT_RETURN_IF_ERROR(ctx_.Synchronize());
  std::vector<NamedTensor> tensors;
  for (const models::ParamInfo& p : model_->param_infos()) {
    tensors.push_back(
        {p.name, p.shape, std::vector<float>(flat.begin() + p.offset, flat.begin() + p.offset + p.numel)});
  }
  return WriteSafetensors(path, tensors, {{"format", "pt"}, {"producer", "dtrain"}});
}

}  // namespace dtrain::runtime
