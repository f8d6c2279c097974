#include "storage/config_options.h"

namespace dtrain::storage {

StorageOptions OptionsFromConfig(const proto::StorageConfig& c) {
  StorageOptions o;
  o.endpoint = c.endpoint();
  o.region = c.region();
  o.path_style = c.path_style();
  o.multipart_threshold = static_cast<uint64_t>(c.multipart_threshold_mb()) << 20;
  o.part_size = static_cast<uint64_t>(c.part_size_mb()) << 20;
  o.parallel_parts = static_cast<int>(c.parallel_parts());
  o.retry_budget_s = c.retry_budget_s();
  o.unsigned_payload = c.unsigned_payload();
  return o;
}

}  // namespace dtrain::storage
