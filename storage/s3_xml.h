#pragma once
// A tiny, bounded extractor for the few fields dtrain reads from S3's XML answers (ListObjectsV2,
// ListMultipartUploads, CreateMultipartUpload, errors). Not a general XML parser: it finds
// <Tag>text</Tag> pairs by plain search, decodes the five predefined entities and numeric
// character references (rejecting malformed ones), and never reads past the input. Linear in the
// input; inputs over kMaxXmlBytes and more than `max_count` matches are cut off, so hostile answers
// cannot blow up. The checks of a listing's keys are in storage/s3_list.h.

#include <cstddef>
#include <string>
#include <vector>

namespace dtrain::storage::detail {

constexpr size_t kMaxXmlBytes = 16u << 20;

// The decoded text of the first <tag>...</tag> in xml; false when absent, unterminated, or when its
// text does not decode (XmlDecode).
bool XmlFirst(const std::string& xml, const std::string& tag, std::string* out);

// The raw (undecoded) inner text of every <tag>...</tag> in order, at most max_count of them.
std::vector<std::string> XmlBlocks(const std::string& xml, const std::string& tag, size_t max_count);

// Decodes &amp; &lt; &gt; &quot; &apos; &#N; &#xH; into *out. False (and *out unspecified) when an '&'
// does not start one of these: a bare '&', an unknown entity, a reference with anything but digits
// between "&#" or "&#x" and ';' ("&# 65;", "&#+65;"), or a code point that is 0, a surrogate or
// beyond U+10FFFF. A server that sends such text is not speaking XML; callers reject the field.
bool XmlDecode(const std::string& s, std::string* out);

}  // namespace dtrain::storage::detail
