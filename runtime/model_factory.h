#pragma once
// Builds the model named by `model.kind` in the config, on the context's device, for the batch size and
// precision the config gives.

#include <memory>

#include "models/model.h"
#include "proto/config.pb.h"
#include "runtime/core/device_context.h"

namespace dtrain::runtime {

Status BuildModel(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out);

}  // namespace dtrain::runtime
