#include "storage/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dtrain::storage::detail {
namespace {

struct Transfer {
  const HttpRequest* req;
  HttpResponse* resp;
  size_t read_pos = 0;
  long status_seen = 0;  // from the last status line ("HTTP/1.1 206 ..."), before the body arrives
  bool cut = false;      // the testing cut of HttpRequest::cut_after_body_bytes happened
};

size_t OnWrite(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->req->sink != nullptr && t->status_seen >= 200 && t->status_seen < 300) {
    if (t->resp->sink_bytes + bytes > t->req->sink_size) {
      t->resp->too_large = true;
      return 0;
    }
    std::memcpy(t->req->sink + t->resp->sink_bytes, p, bytes);
    t->resp->sink_bytes += bytes;
    return bytes;
  }
  if (t->resp->body.size() + bytes > t->req->max_response) {
    t->resp->too_large = true;
    return 0;  // makes libcurl fail the transfer with CURLE_WRITE_ERROR
  }
  t->resp->body.append(p, bytes);
  return bytes;
}

size_t OnRead(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = std::min(size * n, t->req->body_size - t->read_pos);
  if (t->req->cut_after_body_bytes != SIZE_MAX) {
    if (t->read_pos >= t->req->cut_after_body_bytes) {
      t->cut = true;
      return CURL_READFUNC_ABORT;
    }
    bytes = std::min(bytes, t->req->cut_after_body_bytes - t->read_pos);
  }
  std::memcpy(p, t->req->body + t->read_pos, bytes);
  t->read_pos += bytes;
  return bytes;
}

// Picks ETag and Content-Length out of the response headers; reserves the body for a GET.
size_t OnHeader(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(p, size * n);
  if (line.compare(0, 5, "HTTP/") == 0) {  // a status line: a new answer (after a 100 Continue, say)
    const size_t sp = line.find(' ');
    t->status_seen = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string value = line.substr(colon + 1);
  const size_t b = value.find_first_not_of(" \t");
  const size_t e = value.find_last_not_of(" \t\r\n");
  value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  if (name == "etag") t->resp->etag = value;
  if (name == "content-range") {  // "bytes 0-99/1234" or "bytes */1234"
    const size_t slash = value.rfind('/');
    char* end = nullptr;
    const char* total = slash == std::string::npos ? "" : value.c_str() + slash + 1;
    const unsigned long long v = std::strtoull(total, &end, 10);
    if (end != total && *end == '\0') {
      t->resp->range_total = v;
      t->resp->has_range_total = true;
    }
  }
  if (name == "content-length") {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    if (end != value.c_str() && *end == '\0') {
      t->resp->content_length = v;
      t->resp->has_content_length = true;
      if (t->req->method == "GET" && t->req->sink == nullptr && v <= t->req->max_response && v < (1ull << 40))
        t->resp->body.reserve(v);
    }
  }
  return size * n;
}

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

bool IsRetryableCurlCode(int code) {
  switch (static_cast<CURLcode>(code)) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

HttpClient::HttpClient(long connect_timeout_ms, long stall_timeout_s)
    : connect_timeout_ms_(connect_timeout_ms), stall_timeout_s_(stall_timeout_s) {
  GlobalInitOnce();
}

HttpClient::~HttpClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void HttpClient::Release(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(handle);
}

void HttpClient::Perform(const HttpRequest& req, HttpResponse* resp) {
  *resp = HttpResponse();
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) {
    resp->curl_code = CURLE_FAILED_INIT;
    resp->curl_error = "curl_easy_init failed";
    return;
  }
  curl_easy_reset(curl);  // keeps the connection cache, clears every option
  Transfer t{&req, resp};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  for (const auto& [k, v] : req.headers) headers = curl_slist_append(headers, (k + ": " + v).c_str());
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  headers = curl_slist_append(headers, "Accept:");
  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms_);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, stall_timeout_s_);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  // Larger buffers than libcurl's 16 KiB / 64 KiB defaults: fewer callbacks and syscalls per byte for the
  // multi-MiB bodies of checkpoints (512 KiB is libcurl's maximum receive buffer).
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, 1L << 20);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  if (req.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (req.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body_size));
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, OnRead);
    curl_easy_setopt(curl, CURLOPT_READDATA, &t);
  } else if (req.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body_size));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req.body_size ? req.body : "");
  } else if (req.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  CURLcode rc = curl_easy_perform(curl);
  if (t.cut) {
    rc = CURLE_SEND_ERROR;
    std::snprintf(errbuf, sizeof(errbuf), "connection cut after %zu body bytes (testing)", req.cut_after_body_bytes);
  }
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
  } else {
    resp->curl_code = rc;
    resp->curl_error = resp->too_large ? "response body larger than " + std::to_string(req.max_response) + " bytes"
                                       : (errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc)));
    resp->status = 0;
  }
  curl_slist_free_all(headers);
  Release(curl);
}

}  // namespace dtrain::storage::detail
