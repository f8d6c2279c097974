// model_logits: dtrain's logits of a language model (any model.kind with a token input: gpt2, llama) for given
// tokens, for comparing against another implementation of the same weights (bench/hf_export_check.sh and
// bench/hf_parity.sh: against transformers). The model is built from CONFIG (with --set overrides) at
// train.precision fp32, its parameters read from WEIGHTS: a dtrain safetensors file (final.safetensors or
// `dtrain ckpt export`), or hf:DIR, a Hugging Face directory read as `model.init_from: hf:DIR` reads it
// (runtime/train/hf_import.h). On the first GPU, else the CPU.
//
// usage: model_logits CONFIG WEIGHTS TOKENS OUT [--set k=v ...]
//   TOKENS  int32 little-endian token ids, B*T of them, T = model.<kind>.max_seq_len, B = data.batch_size
//   OUT     float32 logits [B*T, vocab_size] (the padded columns dropped)

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "core/tensor.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/config.h"
#include "runtime/train/auto_sizes.h"
#include "runtime/train/hf_import.h"
#include "runtime/train/model_factory.h"

namespace {

using dtrain::Status;

Status Run(int argc, char** argv) {
  if (argc < 5) return Status::InvalidArgument("usage: model_logits CONFIG WEIGHTS TOKENS OUT [--set k=v ...]");
  std::vector<std::string> sets;
  for (int i = 5; i + 1 < argc; i += 2) sets.push_back(argv[i + 1]);
  sets.push_back("train.precision=fp32");
  dtrain::proto::Config cfg;
  DT_RETURN_IF_ERROR(dtrain::runtime::LoadConfig(argv[1], sets, &cfg));
  DT_RETURN_IF_ERROR(
      dtrain::runtime::ResolveAutoSizes(&cfg));  // sizes given as 0 (gpt2's derived padding), as a worker
  // The whole [B*T, Vp] logits are read below: never the chunked loss's [chunk, Vp] buffer.
  cfg.mutable_model()->mutable_llama()->set_loss_chunk_tokens(0);
  cfg.mutable_model()->mutable_gpt2()->set_loss_chunk_tokens(0);
  dtrain::models::TokenInput in;
  DT_RETURN_IF_ERROR(dtrain::runtime::SyntheticTokenInput(cfg, &in));  // a language model's T and vocabulary
  const int64_t b = cfg.data().batch_size(), t = in.seq_len, v = in.vocab_size;

  std::unique_ptr<dtrain::DeviceContext> ctx;  // the first GPU, else the CPU
  if (!dtrain::DeviceContext::CreateCuda(0, &ctx).ok()) DT_RETURN_IF_ERROR(dtrain::DeviceContext::CreateCpu(&ctx));
  std::unique_ptr<dtrain::models::Model> model;
  DT_RETURN_IF_ERROR(dtrain::runtime::BuildModel(cfg, *ctx, &model));

  std::vector<dtrain::runtime::NamedTensor> weights;
  std::string hf_dir;
  DT_RETURN_IF_ERROR(dtrain::runtime::HfInitDir(argv[2], &hf_dir)
                         ? dtrain::runtime::ImportHuggingFace(cfg, hf_dir, &weights)
                         : dtrain::runtime::ReadSafetensors(argv[2], &weights));
  std::map<std::string, const dtrain::runtime::NamedTensor*> by_name;
  for (const auto& w : weights) by_name[w.name] = &w;
  std::vector<float> flat(model->params().numel());
  for (const auto& p : model->param_infos()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end() || it->second->shape != p.shape) {
      return Status::InvalidArgument(std::string(argv[2]) + ": no tensor '" + p.name + "' of the model's shape");
    }
    std::copy(it->second->data.begin(), it->second->data.end(), flat.begin() + p.offset);
  }
  DT_RETURN_IF_ERROR(model->params().CopyFrom(
      dtrain::Tensor::Wrap(flat.data(), {model->params().numel()}, dtrain::DType::kF32, dtrain::DeviceType::kCPU),
      ctx->stream()));

  std::ifstream tokens_in(argv[3], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(tokens_in)), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(bytes.size()) != b * t * 4) {
    return Status::InvalidArgument(std::string(argv[3]) + ": want " + std::to_string(b * t) + " int32 tokens (B " +
                                   std::to_string(b) + " x T " + std::to_string(t) + ")");
  }
  dtrain::Tensor tokens, targets;
  DT_RETURN_IF_ERROR(dtrain::Tensor::Empty({b, t}, dtrain::DType::kI32, ctx->allocator(), &tokens));
  DT_RETURN_IF_ERROR(dtrain::Tensor::Empty({b, t}, dtrain::DType::kI32, ctx->allocator(), &targets));
  DT_RETURN_IF_ERROR(tokens.CopyFrom(
      dtrain::Tensor::Wrap(bytes.data(), {b, t}, dtrain::DType::kI32, dtrain::DeviceType::kCPU), ctx->stream()));
  DT_RETURN_IF_ERROR(targets.CopyFrom(tokens, ctx->stream()));
  model->set_training(false);  // eval mode: the logits stay logits (no fused classifier writing dlogits over them)
  DT_RETURN_IF_ERROR(model->Forward(tokens, targets));
  const int64_t pv = model->logits().numel() / (b * t);  // the padded vocabulary
  std::vector<float> logits(b * t * pv);
  DT_RETURN_IF_ERROR(dtrain::Tensor::Wrap(logits.data(), {b * t, pv}, dtrain::DType::kF32, dtrain::DeviceType::kCPU)
                         .CopyFrom(model->logits(), ctx->stream()));
  DT_RETURN_IF_ERROR(ctx->Synchronize());
  std::FILE* f = std::fopen(argv[4], "wb");
  if (f == nullptr) return Status::IoError(std::string("cannot write ") + argv[4]);
  bool ok = true;
  for (int64_t r = 0; r < b * t; ++r) ok = ok && std::fwrite(logits.data() + r * pv, sizeof(float), v, f) == size_t(v);
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return Status::IoError(std::string("writing ") + argv[4]);
  std::printf("model_logits: model.kind %s on %s, %lld x %lld logits to %s\n", cfg.model().kind().c_str(),
              ctx->is_cuda() ? "cuda:0" : "cpu", static_cast<long long>(b * t), static_cast<long long>(v), argv[4]);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  const Status st = Run(argc, argv);
  if (!st.ok()) std::fprintf(stderr, "model_logits: %s\n", st.ToString().c_str());
  return st.ok() ? 0 : 1;
}
