#pragma once
// A tiny, bounded extractor for the few fields dtrain reads from S3's XML answers (ListObjectsV2,
// ListMultipartUploads, CreateMultipartUpload, errors). Not a general XML parser: it finds
// <Tag>text</Tag> pairs by plain search, decodes the five predefined entities and numeric
// character references, and never reads past the input. Linear in the input; inputs over
// kMaxXmlBytes and more than `max_count` matches are cut off, so hostile answers cannot blow up.

#include <cstddef>
#include <string>
#include <vector>

namespace dtrain::storage::detail {

constexpr size_t kMaxXmlBytes = 16u << 20;

// The decoded text of the first <tag>...</tag> in xml; false when absent or unterminated.
bool XmlFirst(const std::string& xml, const std::string& tag, std::string* out);

// The raw (undecoded) inner text of every <tag>...</tag> in order, at most max_count of them.
std::vector<std::string> XmlBlocks(const std::string& xml, const std::string& tag, size_t max_count);

// Decodes &amp; &lt; &gt; &quot; &apos; &#N; &#xH; (malformed references are kept verbatim).
std::string XmlDecode(const std::string& s);

}  // namespace dtrain::storage::detail
