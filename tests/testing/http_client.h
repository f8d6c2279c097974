#pragma once
// A blocking HTTP/1.1 client over loopback TCP for tests of HTTP servers (the Prometheus exporter, the Prometheus
// server's API): sends bytes, reads the reply until the server closes the connection or the timeout ends.

#include <string>

namespace dtrain::testing {

// Connects to host:port, sends `request` verbatim and returns all bytes received until EOF or `timeout_s`;
// "" when the connection fails.
std::string HttpExchange(const std::string& host, int port, const std::string& request, double timeout_s = 10);

// GET `target` ("/metrics", "/api/v1/query?query=up"): the status code (-1: no valid reply); the body in *body.
int HttpGet(const std::string& host, int port, const std::string& target, std::string* body, double timeout_s = 10);

// `text` with every byte outside [A-Za-z0-9-._~] percent-encoded (for query strings).
std::string UrlEncode(const std::string& text);

}  // namespace dtrain::testing
