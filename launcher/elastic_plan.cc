#include "launcher/elastic_plan.h"

#include "core/check.h"

namespace dtrain::launcher {

Status ParseNodeRange(const std::string& text, int* min_nodes, int* max_nodes, bool* elastic) {
  const auto colon = text.find(':');
  *elastic = colon != std::string::npos;
  if (!*elastic) {
    if (!ParsePositiveInt(text, min_nodes)) {
      return Status::InvalidArgument("--nnodes: expected a positive integer N or MIN:MAX, got '" + text + "'");
    }
    *max_nodes = *min_nodes;
    return Status::OK();
  }
  if (!ParsePositiveInt(text.substr(0, colon), min_nodes) || !ParsePositiveInt(text.substr(colon + 1), max_nodes)) {
    return Status::InvalidArgument("--nnodes: expected MIN:MAX with two positive integers, got '" + text + "'");
  }
  if (*min_nodes > *max_nodes) {
    return Status::InvalidArgument("--nnodes " + text + ": MIN is larger than MAX");
  }
  return Status::OK();
}

Status PlanBatch(int64_t batch_size, int64_t grad_accum_steps, int full_world, int world, ElasticBatch mode,
                 BatchPlan* out) {
  if (mode == ElasticBatch::kPerGpu || world == full_world) {
    *out = BatchPlan{batch_size, grad_accum_steps};
    return Status::OK();
  }
  const int64_t global = batch_size * grad_accum_steps * full_world;
  if (global % world != 0) {
    return Status::InvalidArgument(
        "--elastic-batch global: the global batch " + std::to_string(global) + " (" + std::to_string(full_world) +
        " ranks x data.batch_size " + std::to_string(batch_size) + " x train.grad_accum_steps " +
        std::to_string(grad_accum_steps) + ") cannot be split evenly over " + std::to_string(world) +
        " ranks (use --elastic-batch per-gpu, or a batch that " + "every world size between MIN and MAX divides)");
  }
  const int64_t share = global / world;
  int64_t accum = (share + batch_size - 1) / batch_size;  // the fewest micro-steps of at most batch_size
  while (share % accum != 0) ++accum;
  *out = BatchPlan{share / accum, accum};
  return Status::OK();
}

Status AttemptBatchSets(const proto::Config& cfg, int full_world, int world, ElasticBatch mode,
                        std::vector<std::string>* sets) {
  const int64_t batch = cfg.data().batch_size(), accum = cfg.train().grad_accum_steps();
  BatchPlan plan;
  DT_RETURN_IF_ERROR(PlanBatch(batch, accum, full_world, world, mode, &plan));
  sets->push_back("data.batch_size=" + std::to_string(plan.batch_size));
  sets->push_back("train.grad_accum_steps=" + std::to_string(plan.grad_accum_steps));
  if (mode == ElasticBatch::kPerGpu && cfg.schedule().samples_per_step() == 0) {
    sets->push_back("schedule.samples_per_step=" + std::to_string(batch * accum * full_world));
  }
  return Status::OK();
}

void ElasticHosts::SetListed(const std::vector<HostSlots>& hosts) {
  listed_ = hosts;
  for (auto it = dropped_.begin(); it != dropped_.end();) {
    bool listed = false;
    for (const HostSlots& h : hosts) listed = listed || h.name == it->first;
    if (!listed) vanish_first_.erase(it->first);
    it = listed ? std::next(it) : dropped_.erase(it);
  }
}

void ElasticHosts::Drop(const std::string& name, Clock::time_point now, bool vanish_first) {
  for (const HostSlots& h : listed_) {
    if (h.name != name || !dropped_.emplace(name, now).second) continue;
    if (vanish_first) vanish_first_.insert(name);
  }
}

std::vector<std::string> ElasticHosts::RejoinCandidates(Clock::time_point now) const {
  std::vector<std::string> out;
  for (const auto& kv : dropped_) {
    if (now - kv.second >= rejoin_after_) out.push_back(kv.first);
  }
  return out;
}

void ElasticHosts::Rejoin(const std::string& name) {
  dropped_.erase(name);
  vanish_first_.erase(name);
}

Status ElasticHosts::Active(std::vector<HostSlots>* out) const {
  out->clear();
  for (const HostSlots& h : listed_) {
    if (dropped_.count(h.name) == 0 && static_cast<int>(out->size()) < max_) out->push_back(h);
  }
  if (static_cast<int>(out->size()) >= min_) return Status::OK();
  std::string lost;
  for (const auto& kv : dropped_) lost += (lost.empty() ? "" : ", ") + kv.first;
  return Status::FailedPrecondition(
      "--nnodes " + std::to_string(min_) + ":" + std::to_string(max_) + ": only " + std::to_string(out->size()) +
      " usable host(s) left (lost: " + (lost.empty() ? "none" : lost) + "), fewer than MIN");
}

}  // namespace dtrain::launcher
