#include "launcher/hostfile.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/check.h"
#include "core/file_guard.h"

namespace dtrain::launcher {
namespace {

constexpr int kMaxCount = 1000000;

// Letters, digits, '-', '.', '_'; starting with a letter or digit (RFC 1123), so that no name reaches mpirun or
// ssh looking like an option ("-oProxyCommand=...").
bool ValidHostName(const std::string& name) {
  if (name.empty() || name[0] == '-' || name[0] == '.') return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Rejects a second line for the same host: Open MPI would silently add the slots up. (A set: a hostfile of 200k
// lines is checked in linear time.)
Status CheckUnique(std::unordered_set<std::string>* seen, const std::string& name, const std::string& where) {
  if (!seen->insert(name).second) return Status::InvalidArgument(where + ": host '" + name + "' is listed twice");
  return Status::OK();
}

}  // namespace

bool ParsePositiveInt(const std::string& text, int* out) {
  if (text.empty() || text.size() > 7) return false;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value <= 0 || value > kMaxCount) return false;
  *out = value;
  return true;
}

Status ParseHostList(const std::string& text, std::vector<HostSlots>* out) {
  out->clear();
  if (text.empty()) return Status::InvalidArgument("--hosts: empty host list (expected e.g. a:8,b:8)");
  if (text.back() == ',') return Status::InvalidArgument("--hosts: trailing ',' in '" + text + "'");
  std::stringstream ss(text);
  std::string item;
  std::unordered_set<std::string> seen;
  while (std::getline(ss, item, ',')) {
    HostSlots host;
    const auto colon = item.rfind(':');
    host.name = item.substr(0, colon);
    if (colon != std::string::npos && !ParsePositiveInt(item.substr(colon + 1), &host.slots)) {
      return Status::InvalidArgument("--hosts: '" + item + "': expected HOST or HOST:N with N a positive integer");
    }
    if (!ValidHostName(host.name)) {
      return Status::InvalidArgument("--hosts: '" + item + "': bad host name (expected e.g. a:8,b:8)");
    }
    DT_RETURN_IF_ERROR(CheckUnique(&seen, host.name, "--hosts"));
    out->push_back(host);
  }
  return Status::OK();
}

Status ParseHostfileText(const std::string& text, const std::string& origin, std::vector<HostSlots>* out) {
  out->clear();
  std::stringstream lines(text);
  std::string line;
  std::unordered_set<std::string> seen;
  for (int lineno = 1; std::getline(lines, line); ++lineno) {
    const std::string where = origin + ":" + std::to_string(lineno);
    line = line.substr(0, line.find('#'));
    std::stringstream words(line);
    std::string word;
    if (!(words >> word)) continue;  // blank or comment-only
    HostSlots host;
    host.name = word;
    if (!ValidHostName(host.name)) return Status::InvalidArgument(where + ": bad host name '" + word + "'");
    DT_RETURN_IF_ERROR(CheckUnique(&seen, host.name, where));
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
      int n = 0;
      if (key != "slots" && key != "max_slots") {
        return Status::InvalidArgument(where + ": unknown attribute '" + word + "' (expected slots=N [max_slots=M])");
      }
      if (!ParsePositiveInt(value, &n)) {
        return Status::InvalidArgument(where + ": '" + word + "': " + key + " must be a positive integer");
      }
      if (key == "slots") host.slots = n;
    }
    out->push_back(host);
  }
  if (out->empty()) return Status::InvalidArgument(origin + ": no hosts in hostfile");
  return Status::OK();
}

Status ParseHostfile(const std::string& path, std::vector<HostSlots>* out) {
  // A FIFO (or a directory, a device) must not hang or garble the launch: regular files only.
  const Status regular = CheckRegularFile(path, "--hostfile");
  if (regular.code() == Status::Code::kInvalidArgument) return regular;
  std::ifstream in(path);
  if (!in) return Status::NotFound("--hostfile: cannot read '" + path + "': " + std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseHostfileText(buf.str(), path, out);
}

}  // namespace dtrain::launcher
