#include "storage/s3_storage.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "storage/http_client.h"
#include "storage/key_util.h"
#include "storage/s3_list.h"
#include "storage/s3_retry.h"
#include "storage/s3_xml.h"
#include "storage/sha256.h"
#include "storage/sigv4.h"

namespace dtrain::storage {
namespace {

using detail::HttpResponse;
using detail::S3ErrorCode;

constexpr char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kUnsigned[] = "UNSIGNED-PAYLOAD";
constexpr uint64_t kMinPartSize = 5ull << 20;
constexpr int kMaxListPages = 100000;  // bounds a server that keeps answering "truncated"

std::string FirstNonEmpty(const std::string& a, const char* env1, const char* env2 = nullptr) {
  if (!a.empty()) return a;
  for (const char* e : {env1, env2}) {
    const char* v = e ? std::getenv(e) : nullptr;
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

}  // namespace

S3Storage::S3Storage() = default;
S3Storage::~S3Storage() = default;

Status S3Storage::Open(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out) {
  std::unique_ptr<S3Storage> s(new S3Storage());
  s->url_ = url;
  s->opts_ = opts;
  const std::string rest = url.substr(5);  // after "s3://"
  const size_t slash = rest.find('/');
  s->bucket_ = rest.substr(0, slash);
  s->prefix_ = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!s->prefix_.empty() && s->prefix_.back() == '/') s->prefix_.pop_back();
  if (s->bucket_.find('@') != std::string::npos) {  // s3://key:secret@bucket: never echo it
    return Status::InvalidArgument("storage URL '" + RedactUrl(url) +
                                   "': credentials do not belong in the URL (set AWS_ACCESS_KEY_ID and "
                                   "AWS_SECRET_ACCESS_KEY)");
  }
  if (s->bucket_.empty() || s->bucket_.size() > 63 ||
      s->bucket_.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-_") != std::string::npos) {
    return Status::InvalidArgument("storage URL '" + url + "': bad bucket name '" + s->bucket_ + "'");
  }
  if (!s->prefix_.empty()) DT_RETURN_IF_ERROR(detail::ValidateKey(url, s->prefix_).WithContext("prefix"));

  s->region_ = FirstNonEmpty(opts.region, "AWS_REGION", "AWS_DEFAULT_REGION");
  if (s->region_.empty()) s->region_ = "us-east-1";
  s->endpoint_ = FirstNonEmpty(opts.endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
  // Named in error messages: a wrong endpoint is one cause of rejected credentials.
  if (!opts.endpoint.empty()) {
    s->endpoint_from_ = "storage.endpoint";
  } else if (!FirstNonEmpty("", "AWS_ENDPOINT_URL_S3").empty()) {
    s->endpoint_from_ = "AWS_ENDPOINT_URL_S3";
  } else {
    s->endpoint_from_ = s->endpoint_.empty() ? "the AWS default for the region" : "AWS_ENDPOINT_URL";
  }
  if (s->endpoint_.empty()) s->endpoint_ = "https://s3." + s->region_ + ".amazonaws.com";
  while (!s->endpoint_.empty() && s->endpoint_.back() == '/') s->endpoint_.pop_back();
  const size_t sep = s->endpoint_.find("://");
  s->scheme_ = sep == std::string::npos ? "https" : s->endpoint_.substr(0, sep);
  s->host_ = sep == std::string::npos ? s->endpoint_ : s->endpoint_.substr(sep + 3);
  if ((s->scheme_ != "http" && s->scheme_ != "https") || s->host_.empty() ||
      s->host_.find_first_of("/?#@ ") != std::string::npos) {
    return Status::InvalidArgument(RedactUrl(url) + ": bad S3 endpoint '" + RedactUrl(s->endpoint_) +
                                   "' (want http[s]://host[:port]; credentials go in AWS_* variables, not the URL)");
  }
  s->endpoint_ = s->scheme_ + "://" + s->host_;

  s->access_key_ = FirstNonEmpty(opts.access_key, "AWS_ACCESS_KEY_ID");
  s->secret_key_ = FirstNonEmpty(opts.secret_key, "AWS_SECRET_ACCESS_KEY");
  s->session_token_ = FirstNonEmpty(opts.session_token, "AWS_SESSION_TOKEN");
  if (s->access_key_.empty() || s->secret_key_.empty()) {
    return Status::InvalidArgument(url + ": no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY " +
                                   "(or the storage options' access_key/secret_key)");
  }
  if (opts.part_size < kMinPartSize || opts.multipart_threshold < kMinPartSize || opts.parallel_parts < 1 ||
      opts.max_retries < 0 || !(opts.retry_budget_s >= 0 && opts.retry_budget_s <= 86400)) {
    return Status::InvalidArgument(url + ": storage options: part_size and multipart_threshold must be >= 5 MiB, " +
                                   "parallel_parts >= 1, max_retries >= 0, retry_budget_s in [0, 86400]");
  }
  s->http_ = std::make_unique<detail::HttpClient>(/*connect_timeout_ms=*/5000, /*stall_timeout_s=*/60);
  *out = std::move(s);
  return Status::OK();
}

std::string S3Storage::ObjectName(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "/" + key; }

std::string S3Storage::What(const std::string& key) const { return "s3://" + bucket_ + "/" + ObjectName(key); }

Status S3Storage::Send(const Call& call, HttpResponse* resp, const std::string& what) {
  // Path-style: http://host/bucket/object; virtual-host: http://bucket.host/object.
  const std::string host = opts_.path_style ? host_ : bucket_ + "." + host_;
  std::string path = opts_.path_style ? "/" + bucket_ : "";
  if (!call.object.empty() || path.empty()) path += "/" + call.object;
  const std::string query = CanonicalQuery(call.query);
  detail::HttpRequest req;
  req.method = call.method;
  req.url = scheme_ + "://" + host + UriEncode(path, false) + (query.empty() ? "" : "?" + query);
  req.body = call.body;
  req.body_size = call.body_size;
  req.max_response = call.max_response;
  req.sink = call.sink;
  req.sink_size = call.sink_size;
  std::string payload_hash = call.payload_hash;
  if (payload_hash.empty() && call.body_size == 0) payload_hash = kEmptySha;
  if (payload_hash.empty()) payload_hash = UnsignedBodies() ? kUnsigned : Sha256Hex(call.body, call.body_size);
  const SigV4Key key{access_key_, secret_key_, region_, "s3"};
  // The retry policy of storage/s3_retry.h: full-jitter backoff, bounded by max_retries and by the
  // retry budget, measured from the first attempt.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.retry_budget_s));
  thread_local std::mt19937_64 rng(std::random_device{}());
  int attempts = 0;
  std::string reason;
  const char* stopped_by = "";
  for (int retry = 0;; ++retry) {
    const std::string amz_date = AmzDateNow();  // fresh per attempt: S3 allows 15 min of clock skew
    SigV4Request sig{call.method,
                     path,
                     call.query,
                     {{"host", host}, {"x-amz-content-sha256", payload_hash}, {"x-amz-date", amz_date}},
                     payload_hash};
    if (!session_token_.empty()) sig.headers.emplace_back("x-amz-security-token", session_token_);
    req.headers = sig.headers;
    req.headers.emplace_back("Authorization", AuthorizationHeader(sig, key, amz_date));
    req.headers.insert(req.headers.end(), call.headers.begin(), call.headers.end());
    req.cut_after_body_bytes = attempts < call.cut_attempts ? call.body_size / 2 : SIZE_MAX;
    http_->Perform(req, resp);
    ++attempts;
    if (resp->status >= 200 && resp->status < 300) return Status::OK();
    reason = detail::RetryReason(*resp);
    if (reason.empty()) break;
    if (retry >= opts_.max_retries) {
      stopped_by = "max_retries";
      break;
    }
    // Rounded up: the last wait reaches the deadline, so a budget-ended call has spent at least the budget.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      stopped_by = "retry budget";
      break;
    }
    const int64_t wait_ms = std::min<int64_t>(detail::BackoffMs(retry, &rng), left);
    // `what` is the object's s3:// URL and `reason` a status, an S3 error code or curl's message (which
    // names the host only): no credentials.
    DT_LOG_WARN(kRuntime, "s3: {} {}: {}; retry {} of at most {} in {} ms ({:.1f} s of the {:g} s budget left)",
                call.method, what, reason, retry + 1, opts_.max_retries, wait_ms, left / 1000.0, opts_.retry_budget_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
  const Status st = HttpError(*resp, what);
  if (reason.empty() || attempts == 1) return st;
  const double spent_s = std::chrono::duration<double>(Clock::now() - start).count();
  char tail[160];
  std::snprintf(tail, sizeof(tail), " (after %d attempts in %.1f s; stopped by %s: max_retries %d, retry budget %g s)",
                attempts, spent_s, stopped_by, opts_.max_retries, opts_.retry_budget_s);
  return Status::IoError(st.message() + tail);
}

std::string S3Storage::Where() const {
  return "endpoint " + endpoint_ + " (" + endpoint_from_ + "), region " + region_;
}

Status S3Storage::HttpError(const HttpResponse& r, const std::string& what) const {
  if (r.too_large) return Status::IoError(what + ": S3 answer too large: " + r.curl_error);
  if (r.status == 0) return Status::IoError(what + ": cannot reach S3 endpoint " + endpoint_ + ": " + r.curl_error);
  const std::string code = S3ErrorCode(r);
  std::string message;
  if (!detail::XmlFirst(r.body, "Message", &message)) message.clear();
  message = message.substr(0, 200);
  if (code == "RequestTimeTooSkewed") {  // not retried: waiting does not set the clock
    return Status::FailedPrecondition(what + ": S3 refused the request time (RequestTimeTooSkewed): this machine's " +
                                      "clock differs from the server's by more than 15 minutes; sync it (NTP)");
  }
  // A 403 is a configuration error (credentials, a bucket policy), never a passing failure: InvalidArgument, which
  // `dtrain launch` does not retry (exit 2), since a restart would send the same credentials again. The clock skew
  // above (also a 403) is the exception: the machine's clock, not the job's configuration.
  if (r.status == 403 && (code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId")) {
    const char* fix = code == "SignatureDoesNotMatch"
                          ? "AWS_SECRET_ACCESS_KEY (the secret does not match the access key in AWS_ACCESS_KEY_ID)"
                          : "AWS_ACCESS_KEY_ID (the endpoint does not know this access key)";
    return Status::InvalidArgument("S3 rejected the credentials for " + url_ + ": " + code + " — check " + fix +
                                   " in the environment of every rank; " + Where());
  }
  if (r.status == 403) {
    return Status::InvalidArgument(what + ": access denied (HTTP 403 " + (code.empty() ? "" : code + ": ") + message +
                                   ") — check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY and what that key may do in "
                                   "bucket '" +
                                   bucket_ + "'; " + Where());
  }
  if (r.status == 404 && code == "NoSuchBucket") {
    return Status::NotFound(what + ": bucket '" + bucket_ + "' does not exist at " + endpoint_);
  }
  if (r.status == 404) return Status::NotFound(what + ": no such object");
  return Status::IoError(what + ": HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                         (message.empty() ? "" : ": " + message));
}

Status S3Storage::Put(const std::string& key, const void* data, size_t size) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  if (size >= opts_.multipart_threshold) return PutMultipart(key, static_cast<const char*>(data), size);
  Call call{"PUT", ObjectName(key)};
  call.body = static_cast<const char*>(data);
  call.body_size = size;
  HttpResponse resp;
  return Send(call, &resp, What(key));
}

Status S3Storage::Get(const std::string& key, std::string* out) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  Call call{"GET", ObjectName(key)};
  call.max_response = SIZE_MAX;
  HttpResponse resp;
  DT_RETURN_IF_ERROR(Send(call, &resp, What(key)));
  *out = std::move(resp.body);
  return Status::OK();
}

Status S3Storage::GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  out->clear();
  if (size == 0) {
    ObjectInfo info;
    return Head(key, &info);  // NotFound stays NotFound
  }
  const uint64_t last = size > UINT64_MAX - offset ? UINT64_MAX - 1 : offset + size - 1;
  Call call{"GET", ObjectName(key)};
  call.headers = {{"Range", "bytes=" + std::to_string(offset) + "-" + std::to_string(last)}};
  call.max_response = size < SIZE_MAX - (1u << 20) ? size + (1u << 20) : SIZE_MAX;  // room for an error body
  HttpResponse resp;
  const Status st = Send(call, &resp, What(key));
  if (resp.status == 416) return Status::OK();  // offset at or past the end: no bytes
  DT_RETURN_IF_ERROR(st);
  if (resp.status != 206) {  // a server that ignored Range sent the whole object
    resp.body = offset < resp.body.size() ? resp.body.substr(offset, size) : "";
  }
  *out = std::move(resp.body);
  return Status::OK();
}

Status S3Storage::Head(const std::string& key, ObjectInfo* out) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  HttpResponse resp;
  DT_RETURN_IF_ERROR(Send(Call{"HEAD", ObjectName(key)}, &resp, What(key)));
  out->key = key;
  out->size = resp.content_length;
  return Status::OK();
}

Status S3Storage::List(const std::string& prefix, std::vector<ObjectInfo>* out) {
  DT_RETURN_IF_ERROR(detail::ValidatePrefix(url_, prefix));
  out->clear();
  const std::string full_prefix = prefix_.empty() ? prefix : prefix_ + "/" + prefix;
  const std::string strip = prefix_.empty() ? "" : prefix_ + "/";
  std::string token;
  for (int page = 0;; ++page) {
    if (page >= kMaxListPages) return Status::IoError(url_ + ": list '" + prefix + "': more than 100000 pages");
    Call call{"GET", ""};
    call.query = {{"list-type", "2"}, {"prefix", full_prefix}, {"max-keys", std::to_string(list_page_size_)}};
    if (!token.empty()) call.query.emplace_back("continuation-token", token);
    HttpResponse resp;
    const std::string what = url_ + " (list '" + prefix + "')";
    DT_RETURN_IF_ERROR(Send(call, &resp, what));
    detail::ListPage got;
    DT_RETURN_IF_ERROR(detail::ParseListPage(resp.body, what, full_prefix, strip, list_page_size_ + 1, &got));
    out->insert(out->end(), got.objects.begin(), got.objects.end());
    if (!got.truncated) break;
    if (got.next_token.empty() || got.next_token == token) {
      return Status::IoError(url_ + ": list '" + prefix + "': truncated answer without a new continuation token");
    }
    token = got.next_token;
  }
  std::sort(out->begin(), out->end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  for (size_t i = 1; i < out->size(); ++i) {
    if ((*out)[i].key == (*out)[i - 1].key) {
      return Status::IoError(url_ + " (list '" + prefix + "'): the server's listing gives key '" +
                             detail::EscapeForMessage((*out)[i].key) + "' twice");
    }
  }
  return Status::OK();
}

Status S3Storage::Delete(const std::string& key) {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  HttpResponse resp;
  const Status st = Send(Call{"DELETE", ObjectName(key)}, &resp, What(key));
  return st.code() == Status::Code::kNotFound && resp.status == 404 && S3ErrorCode(resp) != "NoSuchBucket"
             ? Status::OK()
             : st;
}

Status S3Storage::CreateBucket() {
  HttpResponse resp;
  const Status st = Send(Call{"PUT", ""}, &resp, "s3://" + bucket_);
  return resp.status == 409 && S3ErrorCode(resp) == "BucketAlreadyOwnedByYou" ? Status::OK() : st;
}

Status S3Storage::ListMultipartUploads(const std::string& key_prefix, std::vector<std::string>* upload_ids) {
  Call call{"GET", ""};
  call.query = {{"uploads", ""}, {"prefix", ObjectName(key_prefix)}};
  HttpResponse resp;
  DT_RETURN_IF_ERROR(Send(call, &resp, url_ + " (list uploads)"));
  upload_ids->clear();
  for (const std::string& block : detail::XmlBlocks(resp.body, "Upload", 10000)) {
    std::string id;
    if (detail::XmlFirst(block, "UploadId", &id)) upload_ids->push_back(id);
  }
  return Status::OK();
}

// ---- the s3 scheme (storage/scheme.h) ------------------------------------------------------------------

namespace {

// A restore reads an object as ranged GETs of part_size, parallel_parts in flight (one connection each).
TransferPlan S3Transfer(const StorageOptions& opts) { return {opts.part_size, opts.parallel_parts}; }

}  // namespace

const Scheme kS3Scheme = {"s3",        "s3://bucket/prefix", {/*remote=*/true, /*needs_owner=*/true}, &S3Storage::Open,
                          &S3Transfer, /*local_dir=*/nullptr};

}  // namespace dtrain::storage
