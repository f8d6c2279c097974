#include "runtime/optim/optim_algorithm.h"

#include <cmath>

#include "core/check.h"

namespace dtrain::runtime {

// Each in its own runtime/optim/<name>_algorithm.cc.
const OptimAlgorithmSpec& SgdAlgorithm();
const OptimAlgorithmSpec& AdamWAlgorithm();
const OptimAlgorithmSpec& LionAlgorithm();

namespace {

// The registered algorithms: one line each.
using SpecFn = const OptimAlgorithmSpec& (*)();
constexpr SpecFn kAlgorithms[] = {
    &SgdAlgorithm,
    &AdamWAlgorithm,
    &LionAlgorithm,
};

}  // namespace

const OptimAlgorithmSpec* FindOptimAlgorithm(const std::string& name) {
  for (SpecFn spec : kAlgorithms) {
    if (spec().name == name) return &spec();
  }
  return nullptr;
}

std::vector<std::string> OptimAlgorithmNames() {
  std::vector<std::string> names;
  for (SpecFn spec : kAlgorithms) names.push_back(spec().name);
  return names;
}

Status CreateOptimAlgorithm(const OptimizerOptions& opts, const OptimAlgorithmSpec** spec,
                            std::unique_ptr<OptimAlgorithm>* out) {
  DT_CHECK_ARG(spec != nullptr && out != nullptr, "spec and out must not be null");
  DT_CHECK_ARG(std::isfinite(opts.lr) && opts.lr >= 0.0, "lr must be finite and >= 0, got " << opts.lr);
  DT_CHECK_ARG(opts.weight_decay >= 0.0, "weight_decay must be >= 0, got " << opts.weight_decay);
  DT_CHECK_ARG(std::isfinite(opts.grad_clip) && opts.grad_clip >= 0.0,
               "grad_clip must be finite and >= 0 (0 = off), got " << opts.grad_clip);
  const OptimAlgorithmSpec* found = FindOptimAlgorithm(opts.name);
  if (found == nullptr) {
    std::string known;
    for (const std::string& name : OptimAlgorithmNames()) known += (known.empty() ? "" : "|") + name;
    return Status::InvalidArgument("unknown optimizer '" + opts.name + "' (expected " + known + ")");
  }
  auto f32_or_bf16 = [](DType t) { return t == DType::kF32 || t == DType::kBF16; };
  DT_CHECK_ARG(f32_or_bf16(opts.state_dtype) && f32_or_bf16(opts.param_dtype) && f32_or_bf16(opts.grad_dtype),
               "optim.state_dtype, train.master_weights and train.gradients must be fp32 or bf16, got "
                   << DTypeName(opts.state_dtype) << ", " << DTypeName(opts.param_dtype) << ", "
                   << DTypeName(opts.grad_dtype));
  if (opts.split_masters) {
    DT_CHECK_ARG(found->split_masters && opts.param_dtype == DType::kBF16,
                 "train.master_weights split is not supported by optim.name "
                     << opts.name << (found->split_masters ? " without bf16 params" : " (adamw takes it)"));
  }
  if (!found->bf16_storage) {
    DT_CHECK_ARG(opts.state_dtype == DType::kF32, "optim.state_dtype bf16 is not supported by optim.name "
                                                      << opts.name
                                                      << " (its update keeps f32 state; adamw takes bf16)");
    DT_CHECK_ARG(opts.param_dtype == DType::kF32, "train.master_weights bf16 is not supported by optim.name "
                                                      << opts.name
                                                      << " (its update writes f32 params; adamw takes bf16)");
    DT_CHECK_ARG(opts.grad_dtype == DType::kF32, "train.gradients bf16 is not supported by optim.name "
                                                     << opts.name << " (its update reads f32 grads; adamw takes bf16)");
  }
  DT_RETURN_IF_ERROR(found->create(opts, out));
  *spec = found;
  return Status::OK();
}

std::vector<DType> OptimizerStateDTypes(const OptimAlgorithmSpec& spec, const OptimizerOptions& opts) {
  return OptimizerStateDTypes(spec.state_names.size(), opts.state_dtype, opts.split_masters);
}

std::vector<DType> OptimizerStateDTypes(size_t state_tensors, DType state_dtype, bool split_masters) {
  std::vector<DType> out(state_tensors, state_dtype);
  if (split_masters) out.push_back(DType::kBF16);
  return out;
}

}  // namespace dtrain::runtime
