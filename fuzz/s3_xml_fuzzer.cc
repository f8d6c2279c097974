// Fuzzes the S3 XML extractor (storage/s3_xml.h) with arbitrary answers, using the tags that
// storage/s3_storage.cc reads. Properties: no crash, leak or hang; XmlBlocks returns at most
// max_count blocks, each a substring of the input; XmlDecode never grows its input (every reference
// is longer than the UTF-8 it stands for) and is the identity on text without '&'.

#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "storage/s3_xml.h"

namespace {

namespace detail = dtrain::storage::detail;

void CheckDecode(const std::string& s) {
  const std::string d = detail::XmlDecode(s);
  DT_FUZZ_ASSERT(d.size() <= s.size(), "decoding grew '" + s + "'");
  if (s.find('&') == std::string::npos) DT_FUZZ_ASSERT(d == s, "decoding changed '" + s + "'");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string xml(reinterpret_cast<const char*>(bytes), size);
  CheckDecode(xml);
  for (const char* tag : {"Code", "Message", "IsTruncated", "NextContinuationToken", "UploadId"}) {
    std::string value;
    if (detail::XmlFirst(xml, tag, &value)) DT_FUZZ_ASSERT(value.size() <= xml.size(), tag);
  }
  for (const auto& [outer, max_count] : {std::pair<const char*, size_t>{"Contents", 1000}, {"Upload", 3}}) {
    const std::vector<std::string> blocks = detail::XmlBlocks(xml, outer, max_count);
    DT_FUZZ_ASSERT(blocks.size() <= max_count, outer);
    for (const std::string& b : blocks) {
      DT_FUZZ_ASSERT(xml.find(b) != std::string::npos, "block not in the input");
      for (const char* inner : {"Key", "Size", "UploadId"}) {
        for (const std::string& raw : detail::XmlBlocks(b, inner, 2)) CheckDecode(raw);
      }
    }
  }
  return 0;
}
