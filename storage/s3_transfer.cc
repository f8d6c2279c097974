// S3Storage's parallel transfers (storage/s3_storage.h): multipart upload with parts on several connections
// and the body hashes computed ahead of them, and GetInto's parallel ranged GETs into the caller's buffer.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "core/parallel_for.h"
#include "storage/http_client.h"
#include "storage/key_util.h"
#include "storage/s3_storage.h"
#include "storage/s3_xml.h"
#include "storage/sha256.h"

namespace dtrain::storage {
namespace {

constexpr int kMaxParts = 10000;
constexpr uint64_t kUnknownSize = UINT64_MAX;  // a 416 answer without Content-Range

}  // namespace

// ---------------------------------------------------------------------------------------------
// Multipart upload:
//   1. POST ?uploads=                      -> UploadId
//   2. PUT ?partNumber=i&uploadId=ID        parts 1..n, parallel_parts in flight -> ETag each
//   3. POST ?uploadId=ID <CompleteMultipartUpload>  the object appears, whole, only now
//   on any failure: DELETE ?uploadId=ID (abort) so that no parts are left billed and hidden.

Status S3Storage::PutMultipart(const std::string& key, const char* data, size_t size) {
  const std::string object = ObjectName(key);
  const std::string what = What(key);
  Call create{"POST", object, {{"uploads", ""}}};
  detail::HttpResponse resp;
  DT_RETURN_IF_ERROR(Send(create, &resp, what + " (create multipart upload)"));
  std::string upload_id;
  if (!detail::XmlFirst(resp.body, "UploadId", &upload_id) || upload_id.empty()) {
    return Status::IoError(what + ": CreateMultipartUpload answer has no UploadId");
  }

  std::vector<std::string> etags;
  Status st = UploadParts(object, what, upload_id, data, size, &etags);
  if (st.ok()) {
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    Call complete{"POST", object, {{"uploadId", upload_id}}, {{"Content-Type", "application/xml"}}};
    complete.body = xml.data();
    complete.body_size = xml.size();
    st = Send(complete, &resp, what + " (complete multipart upload)");
    // S3 may answer 200 and still fail: the error is then in the body.
    if (st.ok() && resp.body.find("<Error>") != std::string::npos) st = HttpError(resp, what + " (complete)");
  }
  if (!st.ok()) {
    const Status abort = Send(Call{"DELETE", object, {{"uploadId", upload_id}}}, &resp, what + " (abort)");
    if (!abort.ok()) DT_LOG_WARN(kRuntime, "s3: abort of a failed multipart upload: {}", abort.ToString());
  }
  return st;
}

// The payloads stay signed by default (x-amz-content-sha256 = the hex SHA-256 of each part): over plain HTTP
// (a loopback or in-cluster endpoint) it is the only integrity check the server makes on the bytes it
// stores, and from OpenSSL (SHA-NI) it costs ~1 GB/s of one core, which the hashing thread below spends
// while the parts ahead of it are on the wire. StorageOptions::unsigned_payload (for https endpoints, where
// TLS protects the bytes in flight) sends UNSIGNED-PAYLOAD instead. Either way the CRC32C of every
// checkpoint file (in its manifest) is checked end to end on load.
Status S3Storage::UploadParts(const std::string& object, const std::string& what, const std::string& upload_id,
                              const char* data, size_t size, std::vector<std::string>* etags) {
  uint64_t part_size = opts_.part_size;
  while ((size + part_size - 1) / part_size > kMaxParts) part_size *= 2;  // S3 allows 10000 parts
  const size_t n = (size + part_size - 1) / part_size;
  etags->assign(n, "");
  auto part_bytes = [&](size_t i) { return std::min<uint64_t>(part_size, size - i * part_size); };

  // One thread hashes the parts in order and publishes each hash; a sender of part i waits only until part
  // i is hashed. Hashing is faster than one connection sends, so after the first part the senders do not wait.
  std::vector<std::string> hashes(n);
  std::mutex mu;
  std::condition_variable hashed_cv;
  size_t hashed = 0;
  std::atomic<bool> stop{false};
  std::thread hasher([&] {
    for (size_t i = 0; i < n && !stop.load(); ++i) {
      std::string h = UnsignedBodies() ? "UNSIGNED-PAYLOAD" : Sha256Hex(data + i * part_size, part_bytes(i));
      std::lock_guard<std::mutex> lock(mu);
      hashes[i] = std::move(h);
      hashed = i + 1;
      hashed_cv.notify_all();
    }
  });
  const Status st = ParallelFor(n, static_cast<size_t>(opts_.parallel_parts), [&](size_t i) -> Status {
    const int part = static_cast<int>(i + 1);
    const std::string part_what = what + " (part " + std::to_string(part) + "/" + std::to_string(n) + ")";
    if (part == failing_part_) return Status::IoError(part_what + ": injected failure (testing)");
    Call call{"PUT", object, {{"partNumber", std::to_string(part)}, {"uploadId", upload_id}}};
    call.body = data + i * part_size;
    call.body_size = part_bytes(i);
    call.cut_attempts = part == cut_part_ ? cut_times_ : 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      hashed_cv.wait(lock, [&] { return hashed > i; });
      call.payload_hash = hashes[i];
    }
    detail::HttpResponse resp;
    DT_RETURN_IF_ERROR(Send(call, &resp, part_what));
    if (resp.etag.empty()) return Status::IoError(part_what + ": UploadPart answer has no ETag");
    (*etags)[i] = resp.etag;
    return Status::OK();
  });
  stop = true;
  hasher.join();
  return st;
}

// ---------------------------------------------------------------------------------------------
// GetInto: ranges of part_size bytes, parallel_parts in flight, each written by libcurl straight into its
// place in dst. Every answer carries the object's size (Content-Range "bytes a-b/T"); they must agree.

Status S3Storage::GetChunk(const std::string& key, char* dst, uint64_t offset, uint64_t size, uint64_t* got,
                           uint64_t* total) {
  Call call{"GET", ObjectName(key)};
  call.headers = {{"Range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + size - 1)}};
  call.sink = dst;
  call.sink_size = size;
  detail::HttpResponse resp;
  const Status st = Send(call, &resp, What(key));
  if (resp.status == 416) {  // the range starts at or past the end (the size only if "bytes */T" came with it)
    *got = 0;
    *total = resp.has_range_total ? resp.range_total : kUnknownSize;
    return Status::OK();
  }
  DT_RETURN_IF_ERROR(st);
  if (resp.status != 206 || !resp.has_range_total) {
    return Status::IoError(What(key) + ": the server answered a range GET with HTTP " + std::to_string(resp.status) +
                           " and no Content-Range (ranges unsupported?)");
  }
  *got = resp.sink_bytes;
  *total = resp.range_total;
  return Status::OK();
}

Status S3Storage::GetRangeInto(const std::string& key, uint64_t offset, void* dst, uint64_t size, uint64_t* got,
                               uint64_t* object_size) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  uint64_t total = kUnknownSize;
  *got = 0;
  if (size > 0) DT_RETURN_IF_ERROR(GetChunk(key, static_cast<char*>(dst), offset, size, got, &total));
  if (total == kUnknownSize) {  // nothing asked, or a 416 without the size: ask for it
    ObjectInfo info;
    DT_RETURN_IF_ERROR(Head(key, &info));
    total = info.size;
  }
  *object_size = total;
  return Status::OK();
}

Status S3Storage::GetInto(const std::string& key, void* dst, uint64_t size, uint64_t* object_size) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  if (size == 0) {
    ObjectInfo info;
    DT_RETURN_IF_ERROR(Head(key, &info));
    *object_size = info.size;
    return Status::OK();
  }
  const uint64_t chunk = opts_.part_size;
  const size_t n = static_cast<size_t>((size + chunk - 1) / chunk);
  std::vector<uint64_t> got(n, 0), totals(n, 0);
  char* out = static_cast<char*>(dst);
  DT_RETURN_IF_ERROR(ParallelFor(n, static_cast<size_t>(opts_.parallel_parts), [&](size_t i) {
    const uint64_t offset = i * chunk;
    return GetChunk(key, out + offset, offset, std::min<uint64_t>(chunk, size - offset), &got[i], &totals[i]);
  }));
  // The object's size: from any answer that gave it; when none did, every range was past the end (416), and
  // the first of them starts at 0: an empty object.
  uint64_t total = 0;
  for (uint64_t t : totals) {
    if (t != kUnknownSize) total = t;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t offset = i * chunk;
    const uint64_t want = offset >= total ? 0 : std::min<uint64_t>({chunk, size - offset, total - offset});
    const bool size_agrees = totals[i] == total || (totals[i] == kUnknownSize && offset >= total);
    if (!size_agrees || got[i] != want) {
      return Status::IoError(What(key) + ": the object changed while it was read (range at " + std::to_string(offset) +
                             ": " + std::to_string(got[i]) + " bytes, expected " + std::to_string(want) + " of " +
                             std::to_string(total) + ")");
    }
  }
  *object_size = total;
  return Status::OK();
}

}  // namespace dtrain::storage
