#pragma once
// Test helpers for the sharded-dataset tests: small datasets with known contents.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/shard_writer.h"

namespace dtrain::data::fixture {

// An IMAGE dataset of n samples of h x w pixels: sample i has label i % 10 and pixel p = (i + p) % 251.
inline void WriteImageDataset(const std::string& dir, int64_t n, int64_t h, int64_t w, int64_t per_shard) {
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::IMAGE);
  schema.add_dims(h);
  schema.add_dims(w);
  schema.set_has_label(true);
  schema.set_num_classes(10);
  schema.set_pixel_mean(0.0f);
  schema.set_pixel_std(1.0f);
  std::unique_ptr<DatasetWriter> wr;
  ASSERT_TRUE(DatasetWriter::Create(dir, schema, per_shard, &wr).ok());
  std::vector<uint8_t> rec(4 + h * w);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t label = static_cast<uint32_t>(i % 10);
    std::memcpy(rec.data(), &label, 4);
    for (int64_t p = 0; p < h * w; ++p) rec[4 + p] = static_cast<uint8_t>((i + p) % 251);
    ASSERT_TRUE(wr->Add(rec.data(), rec.size()).ok());
  }
  ASSERT_TRUE(wr->Finish("test fixture").ok());
}

inline void FlipByte(const std::string& path, uint64_t offset) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ 0x40, f);
  std::fclose(f);
}

}  // namespace dtrain::data::fixture
