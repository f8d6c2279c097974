#include "runtime/optim/sharded_updater.h"

#include "core/check.h"

namespace dtrain::runtime {

ShardedUpdater::ShardedUpdater(DeviceContext& ctx, models::Model& model, std::unique_ptr<Zero1Optimizer> zero1,
                               int world, std::unique_ptr<LossScaler> scaler)
    : ParameterUpdater(ctx, model.params().numel(), std::move(scaler)), zero1_(std::move(zero1)), world_(world) {}

void ShardedUpdater::DescribeSharding(proto::ShardingState* out) const {
  out->set_zero1(true);
  out->set_world_size(world_);
  out->set_num_buckets(static_cast<int32_t>(zero1_->buckets().size()));
  out->set_shard_numel(zero1_->shard_numel());
}

}  // namespace dtrain::runtime
