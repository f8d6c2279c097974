#pragma once
// S3Storage: the s3:// backend of storage::Storage, for AWS S3 and S3-compatible servers (Ceph RGW,
// MinIO, Alibaba OSS). Requests are signed with our own SigV4 (storage/sigv4.h) and sent with libcurl.
//
// URL: s3://bucket[/prefix]; key K is the object `prefix/K`.
// Settings, each from StorageOptions when set, else from the environment:
//   endpoint       AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL; else https://s3.<region>.amazonaws.com
//   region         AWS_REGION, then AWS_DEFAULT_REGION; else us-east-1
//   access_key     AWS_ACCESS_KEY_ID        secret_key  AWS_SECRET_ACCESS_KEY
//   session_token  AWS_SESSION_TOKEN (sent as x-amz-security-token, signed)
// Addressing: path-style (endpoint/bucket/key) or virtual-host (bucket.endpoint-host/key).
// Objects of at least multipart_threshold bytes go up as a multipart upload (storage/s3_transfer.cc:
// parallel_parts parts in flight, each on its own connection, their SHA-256 computed by one hashing thread
// ahead of the senders); it is completed last, so readers never see a torn object, and aborted on any
// failure. GetInto fetches parallel_parts ranges of part_size bytes at once straight into the caller's buffer.
// Retries (storage/s3_retry.h, the AWS SDKs' "standard" mode): 5xx, 408, 429, throttling and transient
// error codes (SlowDown, Throttling, RequestTimeout, InternalError, ...) and curl connect/timeout/send/
// recv errors are retried with full-jitter exponential backoff (100 ms base, 20 s cap) until
// max_retries retries or retry_budget_s seconds (default 60) are spent; other 4xx are not retried.
// A 403 (SignatureDoesNotMatch, InvalidAccessKeyId, AccessDenied, ...) is InvalidArgument: a configuration error
// (exit 2, never restarted by `dtrain launch --max-restarts`), naming the variable to check and the endpoint with
// where it came from (storage.endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL); RequestTimeTooSkewed (also a 403)
// is FailedPrecondition: the machine's clock.
// Each retry is one warning naming the object, the reason and the attempt. Credentials never appear
// in a Status message or a log line.
// Listings are checked key by key (storage/s3_list.h): a key outside the requested prefix, with a
// "..", "." or empty segment, a control byte, or over 1024 bytes, or listed twice, is an IoError
// naming it, not an object.
// Thread-safe: curl easy handles come from an internal pool; every call may run concurrently.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/scheme.h"
#include "storage/storage.h"

namespace dtrain::storage {

namespace detail {
class HttpClient;
struct HttpRequest;
struct HttpResponse;
}  // namespace detail

class S3Storage : public Storage {
 public:
  static Status Open(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out);
  ~S3Storage() override;

  Status Put(const std::string& key, const void* data, size_t size) override;
  Status Get(const std::string& key, std::string* out) override;
  Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) override;
  Status GetInto(const std::string& key, void* dst, uint64_t size, uint64_t* object_size) override;
  // One ranged GET written straight into dst (the checkpoint restore's chunks; its threads are the parallelism).
  Status GetRangeInto(const std::string& key, uint64_t offset, void* dst, uint64_t size, uint64_t* got,
                      uint64_t* object_size) override;
  Status Head(const std::string& key, ObjectInfo* out) override;
  Status List(const std::string& prefix, std::vector<ObjectInfo>* out) override;
  Status Delete(const std::string& key) override;
  const std::string& url() const override { return url_; }

  // Creates the bucket (PUT /bucket); OK when this account already owns it. For tests and tools.
  Status CreateBucket();
  // Upload ids of multipart uploads in progress whose object name starts with prefix/`key_prefix`.
  Status ListMultipartUploads(const std::string& key_prefix, std::vector<std::string>* upload_ids);
  // The resolved endpoint (no credentials), e.g. "http://127.0.0.1:7480".
  const std::string& endpoint() const { return endpoint_; }

  // ListObjectsV2 page size (max-keys); tests lower it to exercise continuation tokens.
  void set_list_page_size(int n) { list_page_size_ = n; }
  // Testing only: UploadPart of this part number (1-based) fails with IoError before it is sent.
  void set_failing_part_for_testing(int part_number) { failing_part_ = part_number; }
  // Testing only: the first `times` attempts of UploadPart `part_number` are cut halfway through their body
  // (a real partial request reaches the server), which the retry policy then retries.
  void set_part_cut_for_testing(int part_number, int times) {
    cut_part_ = part_number;
    cut_times_ = times;
  }

 private:
  S3Storage();

  // One S3 call: method, object name ("" = the bucket itself), decoded query, body.
  struct Call {
    using Pairs = std::vector<std::pair<std::string, std::string>>;
    Call(std::string m, std::string o, Pairs q = {}, Pairs h = {})
        : method(std::move(m)), object(std::move(o)), query(std::move(q)), headers(std::move(h)) {}
    std::string method;
    std::string object;
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;  // extra, unsigned (Range, Content-Type)
    const char* body = nullptr;
    size_t body_size = 0;
    std::string payload_hash;  // hex SHA-256 of the body when the caller computed it already; "" = Send hashes
    size_t max_response = 64u << 20;
    char* sink = nullptr;  // a 2xx answer's body goes here (detail::HttpRequest::sink)
    size_t sink_size = 0;
    int cut_attempts = 0;  // testing: this many first attempts are cut halfway through the body
  };
  // Signs and sends `call`, retrying as documented above; OK only for a 2xx answer (in *resp).
  // Errors name `what` (the URL and key) and never the credentials.
  Status Send(const Call& call, detail::HttpResponse* resp, const std::string& what);
  Status HttpError(const detail::HttpResponse& resp, const std::string& what) const;
  std::string Where() const;  // "endpoint E (where E came from), region R" for error messages: no credentials
  std::string ObjectName(const std::string& key) const;
  // Bodies (PUT, UploadPart) go as UNSIGNED-PAYLOAD (StorageOptions::unsigned_payload), not hashed.
  bool UnsignedBodies() const { return opts_.unsigned_payload; }
  std::string What(const std::string& key) const;  // "s3://bucket/prefix/key"
  Status PutMultipart(const std::string& key, const char* data, size_t size);
  Status UploadParts(const std::string& object, const std::string& what, const std::string& upload_id, const char* data,
                     size_t size, std::vector<std::string>* etags);
  // GET of bytes [offset, offset + size) into dst; *total gets the object's size (from Content-Range).
  Status GetChunk(const std::string& key, char* dst, uint64_t offset, uint64_t size, uint64_t* got, uint64_t* total);

  std::string url_;
  std::string bucket_;
  std::string prefix_;  // no leading or trailing '/'; may be empty
  std::string endpoint_;
  std::string endpoint_from_;  // where endpoint_ came from, for error messages: "storage.endpoint", an AWS_* name
  std::string scheme_;         // "http" or "https"
  std::string host_;           // host[:port] of the endpoint
  std::string region_;
  std::string access_key_;
  std::string secret_key_;
  std::string session_token_;
  StorageOptions opts_;
  int list_page_size_ = 1000;
  int failing_part_ = 0;
  int cut_part_ = 0;
  int cut_times_ = 0;
  std::unique_ptr<detail::HttpClient> http_;
};

// The s3 scheme: s3://bucket[/prefix]; remote, its checkpoint roots need an owner object.
extern const Scheme kS3Scheme;

}  // namespace dtrain::storage
