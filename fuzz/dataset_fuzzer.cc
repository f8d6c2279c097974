// Fuzzes the dataset readers (data/manifest.h, data/shard_reader.h). The first byte picks the mode:
//   'M' + bytes   the bytes are <dir>/manifest.pb (sealed or bare, core/sealed_bytes.h): ReadManifest must
//                 return a Status; an accepted manifest has a usable schema and plain shard names, and
//                 survives serialize -> parse; an accepted sealed one is DataLoss after any one bit flip.
//   'S' + bytes   as 'M', with the bytes sealed here first (mutations reach the parser behind a valid checksum).
//   'W' + bytes   a write -> read round trip: records (a length byte, then up to that many bytes) go
//                 through ShardWriter, and ShardReader must give every record back unchanged.
//   otherwise     the whole input is a shard file: Open and every Read must return a Status, and
//                 whatever is accepted lies inside the file and matches its CRC32C.

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/sealed_bytes.h"
#include "data/manifest.h"
#include "data/shard_reader.h"
#include "data/shard_writer.h"
#include "fuzz/fuzz_util.h"

namespace {

using dtrain::Status;
namespace data = dtrain::data;

void FuzzManifest(const uint8_t* bytes, size_t size) {
  dtrain::fuzz::ScratchDir().Write(data::kManifestName, bytes, size);
  dtrain::proto::DatasetManifest m;
  if (!data::ReadManifest(dtrain::fuzz::ScratchDir().dir(), &m).ok()) return;
  DT_FUZZ_ASSERT(data::RecordBytes(m.schema()) > 0, "accepted a manifest whose records have no size");
  uint64_t total = 0;
  for (const auto& sh : m.shards()) {
    DT_FUZZ_ASSERT(!sh.file().empty() && sh.file().find('/') == std::string::npos, "shard name " + sh.file());
    total += sh.num_samples();
  }
  DT_FUZZ_ASSERT(total == m.total_samples(), "total_samples differs from the shards' sum");
  std::string again;
  DT_FUZZ_ASSERT(m.SerializeToString(&again), "cannot serialize an accepted manifest");
  dtrain::proto::DatasetManifest back;
  DT_FUZZ_ASSERT(back.ParseFromString(again) && google::protobuf::util::MessageDifferencer::Equals(m, back),
                 "manifest serialize -> parse changed it");
  std::string file(reinterpret_cast<const char*>(bytes), size);
  if (size >= dtrain::kSealHeaderBytes && file.compare(0, 8, dtrain::kSealMagic, 8) == 0) {
    const size_t bit = dtrain::Crc32c(bytes, size) % (size * 8);
    file[bit / 8] = static_cast<char>(file[bit / 8] ^ (1 << (bit % 8)));
    dtrain::fuzz::ScratchDir().Write(data::kManifestName, reinterpret_cast<const uint8_t*>(file.data()), size);
    DT_FUZZ_ASSERT(data::ReadManifest(dtrain::fuzz::ScratchDir().dir(), &m).code() == Status::Code::kDataLoss,
                   "a sealed manifest with bit " + std::to_string(bit) + " flipped still reads");
  }
}

void FuzzWriteRead(const uint8_t* bytes, size_t size) {
  std::vector<std::string> records;
  for (size_t i = 0; i < size && records.size() < 64;) {
    const size_t n = std::min<size_t>(bytes[i], size - i - 1);
    records.emplace_back(reinterpret_cast<const char*>(bytes + i + 1), n);
    i += 1 + n;
  }
  const std::string path = dtrain::fuzz::ScratchDir().Path("roundtrip.dts");
  data::ShardWriter writer(path);
  for (const std::string& r : records) {
    const Status st = writer.Add(r.data(), r.size());
    DT_FUZZ_ASSERT(st.ok(), st.ToString());
  }
  dtrain::proto::ShardEntry entry;
  Status st = writer.Finish(&entry);
  DT_FUZZ_ASSERT(st.ok(), st.ToString());
  std::unique_ptr<data::ShardReader> reader;
  st = data::ShardReader::Open(path, &reader);
  DT_FUZZ_ASSERT(st.ok(), "a shard just written does not open: " + st.ToString());
  DT_FUZZ_ASSERT(reader->num_records() == static_cast<int64_t>(records.size()) &&
                     entry.num_samples() == records.size() && entry.bytes() == reader->file_size(),
                 "record count or file size differs");
  for (size_t i = 0; i < records.size(); ++i) {
    std::vector<uint8_t> got;
    st = reader->Read(static_cast<int64_t>(i), &got);
    DT_FUZZ_ASSERT(st.ok() && std::string(got.begin(), got.end()) == records[i],
                   "record " + std::to_string(i) + " differs: " + st.ToString());
  }
}

void FuzzShard(const uint8_t* bytes, size_t size) {
  const std::string path = dtrain::fuzz::ScratchDir().Write("fuzz.dts", bytes, size);
  std::unique_ptr<data::ShardReader> reader;
  if (!data::ShardReader::Open(path, &reader).ok()) return;
  DT_FUZZ_ASSERT(reader->file_size() == size, "file size");
  for (int64_t i = 0; i < reader->num_records() && i < 256; ++i) {
    DT_FUZZ_ASSERT(reader->record_size(i) <= size, "record " + std::to_string(i) + " larger than the file");
    std::vector<uint8_t> got;
    if (!reader->Read(i, &got).ok()) continue;
    DT_FUZZ_ASSERT(got.size() == reader->record_size(i), "record size");
  }
  std::vector<uint8_t> out;
  DT_FUZZ_ASSERT(!reader->Read(reader->num_records(), &out).ok() && !reader->Read(-1, &out).ok(),
                 "a record index out of range was accepted");
}

}  // namespace

// Protobuf logs every malformed string it meets; the parser's Status is what is checked here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size > 0 && bytes[0] == 'M') {
    FuzzManifest(bytes + 1, size - 1);
  } else if (size > 0 && bytes[0] == 'S') {
    const std::string sealed = dtrain::Seal(std::string(reinterpret_cast<const char*>(bytes + 1), size - 1));
    FuzzManifest(reinterpret_cast<const uint8_t*>(sealed.data()), sealed.size());
  } else if (size > 0 && bytes[0] == 'W') {
    FuzzWriteRead(bytes + 1, size - 1);
  } else {
    FuzzShard(bytes, size);
  }
  return 0;
}
