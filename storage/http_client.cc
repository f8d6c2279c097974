#include "storage/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace dtrain::storage::detail {
namespace {

struct Transfer {
  const HttpRequest* req;
  HttpResponse* resp;
  size_t read_pos = 0;
};

size_t OnWrite(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->resp->body.size() + bytes > t->req->max_response) {
    t->resp->too_large = true;
    return 0;  // makes libcurl fail the transfer with CURLE_WRITE_ERROR
  }
  t->resp->body.append(p, bytes);
  return bytes;
}

size_t OnRead(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = std::min(size * n, t->req->body_size - t->read_pos);
  std::memcpy(p, t->req->body + t->read_pos, bytes);
  t->read_pos += bytes;
  return bytes;
}

// Picks ETag and Content-Length out of the response headers; reserves the body for a GET.
size_t OnHeader(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(p, size * n);
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string value = line.substr(colon + 1);
  const size_t b = value.find_first_not_of(" \t");
  const size_t e = value.find_last_not_of(" \t\r\n");
  value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  if (name == "etag") t->resp->etag = value;
  if (name == "content-length") {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    if (end != value.c_str() && *end == '\0') {
      t->resp->content_length = v;
      t->resp->has_content_length = true;
      if (t->req->method == "GET" && v <= t->req->max_response && v < (1ull << 40)) t->resp->body.reserve(v);
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
  const CURLcode rc = curl_easy_perform(curl);
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
