#pragma once
// The `storage` section of the config (proto/config.proto StorageConfig) as the StorageOptions every store is
// opened with: the checkpoints' (runtime/train/checkpoint_coordinator.cc) and the datasets' (trainer_data.cc) alike.
// Credentials are left empty (the config is stored in every checkpoint): stores read them from the environment.
// Stateless and thread-safe.

#include "proto/config.pb.h"
#include "storage/storage.h"

namespace dtrain::storage {

StorageOptions OptionsFromConfig(const proto::StorageConfig& c);

}  // namespace dtrain::storage
