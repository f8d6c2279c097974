#include "tests/testing/prometheus_server.h"

#include <cstdlib>

#include "tests/testing/http_client.h"

namespace dtrain::testing {
namespace {

const std::string kScript = std::string(DT_SOURCE_DIR) + "/scripts/prometheus_test_server.sh";

}  // namespace

PrometheusServer::PrometheusServer(const std::string& target, const std::string& interval) {
  const ProcessResult r = RunCommand(kScript + " start " + dir_.path() + "/p " + target + " " + interval);
  if (r.exit_code == 77) {
    skip_reason_ = "no Prometheus server: " + r.output;
    return;
  }
  const std::string env = ReadFile(dir_.path() + "/p/env");
  const size_t at = env.find("PROMETHEUS_PORT=");
  if (r.exit_code != 0 || at == std::string::npos) {
    error_ = "prometheus_test_server.sh start failed:\n" + r.output;
    return;
  }
  port_ = std::atoi(env.c_str() + at + 16);
}

PrometheusServer::~PrometheusServer() {
  if (port_ > 0) RunCommand(kScript + " stop " + dir_.path() + "/p");
}

bool PrometheusServer::Query(const std::string& promql, nlohmann::json* result, std::string* error) const {
  std::string body;
  const int code = HttpGet("127.0.0.1", port_, "/api/v1/query?query=" + UrlEncode(promql), &body);
  const nlohmann::json reply = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (code != 200 || reply.is_discarded() || reply.value("status", "") != "success") {
    *error = "HTTP " + std::to_string(code) + ": " + body;
    return false;
  }
  *result = reply["data"]["result"];
  return true;
}

}  // namespace dtrain::testing
