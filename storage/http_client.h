#pragma once
// HttpClient: one blocking HTTP request at a time per calling thread, over a pool of libcurl easy
// handles (kept between requests so connections are reused). Used by S3Storage; knows nothing of S3.
// Thread-safe: any number of threads may call Perform at once, each gets its own handle.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::storage::detail {

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST, DELETE
  std::string url;     // fully encoded
  std::vector<std::pair<std::string, std::string>> headers;
  const char* body = nullptr;  // PUT/POST body (not owned), body_size bytes
  size_t body_size = 0;
  size_t max_response = SIZE_MAX;  // a longer response body fails the request (WRITE_ERROR)
  // When set, a 2xx answer's body goes straight here (at most sink_size bytes; more fails the request as
  // too large) instead of HttpResponse::body; an error answer's body still goes to HttpResponse::body.
  char* sink = nullptr;
  size_t sink_size = 0;
  // Testing only: the upload is cut after this many body bytes, as a connection reset mid-body would cut
  // it (the server sees a partial request; the response is curl_code CURLE_SEND_ERROR, which is retryable).
  size_t cut_after_body_bytes = SIZE_MAX;
};

struct HttpResponse {
  long status = 0;         // HTTP status; 0 when the transport failed
  int curl_code = 0;       // CURLcode; 0 on a completed exchange
  std::string curl_error;  // libcurl's message when curl_code != 0 (names the host, never headers)
  bool too_large = false;  // the body passed HttpRequest::max_response (curl_code is then set)
  std::string body;
  std::string etag;  // ETag response header, quotes kept
  uint64_t content_length = 0;
  bool has_content_length = false;
  uint64_t sink_bytes = 0;  // body bytes written to HttpRequest::sink
  // The object's total size from a Content-Range answer ("bytes a-b/T" or "bytes */T").
  uint64_t range_total = 0;
  bool has_range_total = false;
};

// Whether a transport failure is worth retrying (connect refused/reset, timeouts, partial transfers).
bool IsRetryableCurlCode(int curl_code);

class HttpClient {
 public:
  // connect_timeout_ms bounds the TCP/TLS connect; a transfer slower than 1 byte/s for
  // stall_timeout_s seconds is aborted (no total timeout: objects may be large).
  HttpClient(long connect_timeout_ms, long stall_timeout_s);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void Perform(const HttpRequest& req, HttpResponse* resp);

 private:
  void* Acquire();
  void Release(void* handle);

  const long connect_timeout_ms_;
  const long stall_timeout_s_;
  std::mutex mu_;
  std::vector<void*> idle_;  // CURL* easy handles
};

}  // namespace dtrain::storage::detail
