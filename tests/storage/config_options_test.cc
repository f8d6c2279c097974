// OptionsFromConfig: every key of the config's `storage` section reaches the StorageOptions the stores open with,
// in its unit (MiB -> bytes), and the credentials stay empty (the stores read them from the environment).

#include "storage/config_options.h"

#include <gtest/gtest.h>

namespace dtrain::storage {
namespace {

TEST(ConfigOptionsTest, EveryKeyReachesTheOptions) {
  proto::StorageConfig c;
  c.set_endpoint("http://127.0.0.1:7480");
  c.set_region("eu-central-1");
  c.set_path_style(false);
  c.set_multipart_threshold_mb(40);
  c.set_part_size_mb(6);
  c.set_parallel_parts(3);
  c.set_retry_budget_s(2.5);
  c.set_unsigned_payload(true);
  const StorageOptions o = OptionsFromConfig(c);
  EXPECT_EQ(o.endpoint, "http://127.0.0.1:7480");
  EXPECT_EQ(o.region, "eu-central-1");
  EXPECT_FALSE(o.path_style);
  EXPECT_EQ(o.multipart_threshold, 40ull << 20);
  EXPECT_EQ(o.part_size, 6ull << 20);
  EXPECT_EQ(o.parallel_parts, 3);
  EXPECT_DOUBLE_EQ(o.retry_budget_s, 2.5);
  EXPECT_TRUE(o.unsigned_payload);
  EXPECT_TRUE(o.access_key.empty());
  EXPECT_TRUE(o.secret_key.empty());
  EXPECT_TRUE(o.session_token.empty());
  EXPECT_EQ(o.max_retries, StorageOptions().max_retries);  // not a config key
}

}  // namespace
}  // namespace dtrain::storage
