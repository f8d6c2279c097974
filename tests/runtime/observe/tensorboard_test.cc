// EventWriter: TFRecord framing checked against bytes computed independently (a bit-by-bit CRC32C
// in Python, see kFileVersionRecord), and a written file read back record by record.

#include "runtime/observe/tensorboard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/crc32c.h"
#include "core/logging.h"
#include "proto/tensorboard.pb.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

uint32_t Fixed32(const std::string& s, size_t pos) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[pos + i]);
  return v;
}

uint64_t Fixed64(const std::string& s, size_t pos) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[pos + i]);
  return v;
}

// Splits a TFRecord file, checking both CRCs of every record.
std::vector<std::string> ReadRecords(const std::string& file) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < file.size()) {
    EXPECT_LE(pos + 12, file.size()) << "truncated header at " << pos;
    if (pos + 12 > file.size()) break;
    const uint64_t len = Fixed64(file, pos);
    EXPECT_EQ(Fixed32(file, pos + 8), MaskedCrc32c(file.data() + pos, 8)) << "length CRC at " << pos;
    EXPECT_LE(pos + 16 + len, file.size()) << "truncated record at " << pos;
    if (pos + 16 + len > file.size()) break;
    const std::string data = file.substr(pos + 12, len);
    EXPECT_EQ(Fixed32(file, pos + 12 + len), MaskedCrc32c(data.data(), data.size())) << "data CRC at " << pos;
    out.push_back(data);
    pos += 16 + len;
  }
  return out;
}

TEST(TensorBoardTest, MaskedCrcMatchesTensorFlow) {
  // crc32c("123456789") = 0xE3069283; masked = rotr15 + 0xa282ead8 = 0xC78AB0E5.
  EXPECT_EQ(MaskedCrc32c("123456789", 9), 0xC78AB0E5u);
}

TEST(TensorBoardTest, FrameMatchesIndependentEncoding) {
  // Event{wall_time: 1.5, file_version: "brain.Event:2"}, encoded and framed by hand in Python:
  // u64 len 24 | masked crc 0x224b7fa3 | 09 <1.5 as LE double> 1a 0d "brain.Event:2" | 0x6c64282a.
  const std::string kFileVersionRecord =
      FromHex("1800000000000000a37f4b2209000000000000f83f1a0d627261696e2e4576656e743a322a28646c");
  tensorboard::Event ev;
  ev.set_wall_time(1.5);
  ev.set_file_version("brain.Event:2");
  EXPECT_EQ(FrameTfRecord(ev.SerializeAsString()), kFileVersionRecord);
}

TEST(TensorBoardTest, WritesReadableEventFile) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/run/tensorboard";  // created with its parent
  const double before = WallSeconds();
  {
    std::unique_ptr<EventWriter> w;
    ASSERT_TRUE(EventWriter::Create(dir, &w).ok());
    ASSERT_TRUE(w->AddScalar("train/loss", 10, 0.5, 1234.5).ok());
    ASSERT_TRUE(w->AddScalars(20, 1240.25, {{"train/loss", 0.25}, {"train/lr", 1e-3}}).ok());
  }  // the destructor closes the file

  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().filename().string());
  ASSERT_EQ(files.size(), 1u);
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(files[0].rfind(prefix, 0), 0u) << files[0];
  const std::string stamp = files[0].substr(prefix.size(), 10);
  EXPECT_EQ(stamp.find_first_not_of("0123456789"), std::string::npos) << files[0];
  EXPECT_NEAR(std::stod(stamp), before, 2.0);
  EXPECT_EQ(files[0].substr(prefix.size() + 10), "." + log::Hostname());

  const std::vector<std::string> recs = ReadRecords(testing::ReadFile(dir + "/" + files[0]));
  ASSERT_EQ(recs.size(), 3u);
  tensorboard::Event ev;
  ASSERT_TRUE(ev.ParseFromString(recs[0]));
  EXPECT_EQ(ev.file_version(), "brain.Event:2");
  EXPECT_NEAR(ev.wall_time(), before, 2.0);

  ASSERT_TRUE(ev.ParseFromString(recs[1]));
  EXPECT_EQ(ev.step(), 10);
  EXPECT_EQ(ev.wall_time(), 1234.5);
  ASSERT_EQ(ev.summary().value_size(), 1);
  EXPECT_EQ(ev.summary().value(0).tag(), "train/loss");
  EXPECT_EQ(ev.summary().value(0).simple_value(), 0.5f);

  ASSERT_TRUE(ev.ParseFromString(recs[2]));
  EXPECT_EQ(ev.step(), 20);
  EXPECT_EQ(ev.wall_time(), 1240.25);
  ASSERT_EQ(ev.summary().value_size(), 2);
  EXPECT_EQ(ev.summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(ev.summary().value(1).tag(), "train/lr");
  EXPECT_EQ(ev.summary().value(1).simple_value(), 1e-3f);  // stored as float, like TF's simple_value
}

TEST(TensorBoardTest, ErrorsNameThePath) {
  testing::TempDir tmp;
  testing::WriteFile(tmp.path() + "/file", "x");
  std::unique_ptr<EventWriter> w;
  Status st = EventWriter::Create(tmp.path() + "/file/tb", &w);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find(tmp.path() + "/file/tb"), std::string::npos) << st.ToString();

  ASSERT_TRUE(EventWriter::Create(tmp.path() + "/tb", &w).ok());
  st = w->AddScalar("", 1, 1.0, 1.0);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  ASSERT_TRUE(w->Close().ok());
  ASSERT_TRUE(w->Close().ok());  // idempotent
  st = w->AddScalar("loss", 1, 1.0, 1.0);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find(w->path()), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace dtrain::runtime
