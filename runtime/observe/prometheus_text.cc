#include "runtime/observe/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace dtrain::runtime {
namespace {

bool NameChar(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string SeriesText(const PromSample& s) {
  std::string out = s.name;
  if (!s.labels.empty()) {
    out += '{';
    for (size_t i = 0; i < s.labels.size(); ++i) {
      out += (i ? "," : "") + s.labels[i].first + "=\"" + EscapePromLabelValue(s.labels[i].second) + '"';
    }
    out += '}';
  }
  return out;
}

bool Valid(const PromSample& s) {
  if (!ValidPromName(s.name, false)) return false;
  for (const auto& l : s.labels) {
    if (!ValidPromName(l.first, true)) return false;
  }
  return true;
}

}  // namespace

bool ValidPromName(const std::string& name, bool label) {
  if (name.empty() || (label && name.rfind("__", 0) == 0)) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, !label)) return false;
  }
  return true;
}

std::string EscapePromLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatPrometheusText(const std::vector<PromSample>& samples, double now_unix) {
  // The valid samples' indices per name, names in order of first appearance.
  std::vector<std::string> names;
  std::map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!Valid(samples[i])) continue;
    auto [it, added] = by_name.try_emplace(samples[i].name);
    if (added) names.push_back(samples[i].name);
    it->second.push_back(i);
  }
  std::string out;
  std::set<std::string> series_done;
  for (const std::string& name : names) {
    const std::vector<size_t>& idx = by_name[name];
    const PromSample& first = samples[idx.front()];
    out += "# HELP " + name + " " + EscapeHelp(first.help) + "\n";
    out += "# TYPE " + name + (first.counter ? " counter\n" : " gauge\n");
    for (size_t i : idx) {
      const PromSample& s = samples[i];
      const std::string series = SeriesText(s);
      if (!series_done.insert(series).second) continue;
      out += series + " " + FormatValue(s.age_of_unix_time ? now_unix - s.value : s.value) + "\n";
    }
  }
  return out;
}

}  // namespace dtrain::runtime
