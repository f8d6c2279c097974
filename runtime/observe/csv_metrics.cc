#include "runtime/observe/csv_metrics.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace dtrain::runtime {
namespace {

std::string HeaderLine(const std::vector<std::string>& columns) {
  std::string s;
  for (size_t i = 0; i < columns.size(); ++i) s += (i ? "," : "") + CsvCell(columns[i]);
  return s;
}

}  // namespace

std::string CsvCell(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

CsvMetricsWriter::~CsvMetricsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

Status CsvMetricsWriter::Open(const std::string& path, const std::vector<std::string>& columns) {
  const std::string header = HeaderLine(columns);
  std::string first;
  {
    std::ifstream in(path);
    if (in) std::getline(in, first);
  }
  if (!first.empty() && first != header) {
    return Status::FailedPrecondition(path + " has other columns than this dtrain writes (its header: '" + first +
                                      "'; expected: '" + header + "'); not appending to it");
  }
  f_ = std::fopen(path.c_str(), "a");
  if (f_ == nullptr) return Status::IoError("cannot open metrics file '" + path + "': " + std::strerror(errno));
  path_ = path;
  columns_ = columns;
  // New or empty: the header first (an append-mode file is positioned at its end).
  if (first.empty() && std::ftell(f_) == 0) {
    const std::string line = header + "\n";
    if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
      return Status::IoError("writing '" + path_ + "': " + std::strerror(errno));
    }
  }
  return Status::OK();
}

Status CsvMetricsWriter::Write(const JsonLine& record) {
  if (f_ == nullptr) return Status::FailedPrecondition("CsvMetricsWriter::Write before Open");
  const nlohmann::ordered_json& obj = record.object();
  std::string line;
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (i) line += ',';
    auto it = obj.find(columns_[i]);
    if (it == obj.end() || it->is_null()) continue;
    line += CsvCell(it->is_string() ? it->get<std::string>()
                                    : it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    return Status::IoError("writing '" + path_ + "': " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
