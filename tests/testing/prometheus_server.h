#pragma once
// A real Prometheus server for tests: Debian's `prometheus`, started by scripts/prometheus_test_server.sh on a free
// loopback port with its TSDB in a temporary directory, scraping one target; stopped (by pid) by the destructor, so
// no process outlives the test. In a test:
//   PrometheusServer prom("127.0.0.1:" + std::to_string(port), "1s");
//   if (!prom.skip_reason().empty()) GTEST_SKIP() << prom.skip_reason();
//   ASSERT_TRUE(prom.ok()) << prom.error();
//   nlohmann::json series; ASSERT_TRUE(prom.Query("dtrain_loss[5m]", &series)) ...

#include <nlohmann/json.hpp>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {

class PrometheusServer {
 public:
  // Starts the server scraping `target` (host:port) every `interval` (a Prometheus duration: "1s", "500ms").
  PrometheusServer(const std::string& target, const std::string& interval);
  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  bool ok() const { return port_ > 0; }
  // Non-empty when the prometheus binary is missing (names the Debian package).
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& error() const { return error_; }  // why it did not start
  int port() const { return port_; }
  const std::string& dir() const { return dir_.path(); }  // prometheus.yml, prometheus.log, data/

  // Runs `promql` through the HTTP API (GET /api/v1/query) and sets *result to the reply's data.result (a vector
  // or a matrix). False, with the reply in *error, when the request fails or the status is not "success".
  bool Query(const std::string& promql, nlohmann::json* result, std::string* error) const;

 private:
  TempDir dir_;
  int port_ = 0;
  std::string skip_reason_, error_;
};

}  // namespace dtrain::testing
