// Fuzzes the S3 XML extractor (storage/s3_xml.h) and the listing checks (storage/s3_list.h) with
// arbitrary answers, using the tags that storage/s3_storage.cc reads. Properties: no crash, leak or
// hang; XmlBlocks returns at most max_count blocks, each a substring of the input; XmlDecode never
// grows its input (every reference is longer than the UTF-8 it stands for) and is the identity on
// text without '&'; every key ParseListPage accepts is a valid storage key inside the listed prefix.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "storage/key_util.h"
#include "storage/s3_list.h"
#include "storage/s3_xml.h"

namespace {

namespace detail = dtrain::storage::detail;

void CheckDecode(const std::string& s) {
  std::string d;
  const bool ok = detail::XmlDecode(s, &d);
  if (s.find('&') == std::string::npos) DT_FUZZ_ASSERT(ok && d == s, "decoding changed '" + s + "'");
  if (ok) DT_FUZZ_ASSERT(d.size() <= s.size(), "decoding grew '" + s + "'");
}

// A listing of the whole store s3://b/p (object names "p/<key>"): whatever ParseListPage accepts must
// be a key that this store's own Put could have made.
void CheckListing(const std::string& xml) {
  detail::ListPage page;
  if (!detail::ParseListPage(xml, "s3://b/p (list '')", "p/", "p/", 1000, &page).ok()) return;
  DT_FUZZ_ASSERT(page.objects.size() <= 1000, "more entries than max_keys");
  for (const dtrain::storage::ObjectInfo& o : page.objects) {
    DT_FUZZ_ASSERT(detail::ValidateKey("s3://b/p", o.key).ok(), "accepted an invalid key '" + o.key + "'");
    DT_FUZZ_ASSERT(o.key.size() + 2 <= detail::kMaxS3KeyBytes, "accepted a key over 1024 bytes");
    DT_FUZZ_ASSERT(o.size <= static_cast<uint64_t>(INT64_MAX), "accepted a size beyond int64");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string xml(reinterpret_cast<const char*>(bytes), size);
  CheckDecode(xml);
  CheckListing(xml);
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
