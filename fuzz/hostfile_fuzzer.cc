// Fuzzes the launcher's host lists (launcher/hostfile.h): hostfile text and `--hosts a:8,b:8`.
// Properties: every input gives a Status; a list that parses has unique, well-formed host names and
// slots in [0, 1'000'000], and rendering it back (as a hostfile, and as --hosts) parses to the same list.

#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "launcher/hostfile.h"

namespace {

using dtrain::launcher::HostSlots;

bool SameHosts(const std::vector<HostSlots>& a, const std::vector<HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].slots != b[i].slots) return false;
  }
  return true;
}

void CheckHosts(const std::vector<HostSlots>& hosts) {
  DT_FUZZ_ASSERT(!hosts.empty(), "an accepted host list is empty");
  for (size_t i = 0; i < hosts.size(); ++i) {
    const HostSlots& h = hosts[i];
    DT_FUZZ_ASSERT(!h.name.empty() && h.name.find_first_of(" \t\r\n:,#=") == std::string::npos,
                   "bad host name '" + h.name + "'");
    DT_FUZZ_ASSERT(h.slots >= 0 && h.slots <= 1000000, "slots " + std::to_string(h.slots));
    for (size_t j = 0; j < i; ++j) DT_FUZZ_ASSERT(hosts[j].name != h.name, "host '" + h.name + "' twice");
  }
  std::string file, list;
  for (const HostSlots& h : hosts) {
    file += h.name + (h.slots > 0 ? " slots=" + std::to_string(h.slots) : "") + "\n";
    list += (list.empty() ? "" : ",") + h.name + (h.slots > 0 ? ":" + std::to_string(h.slots) : "");
  }
  std::vector<HostSlots> back;
  dtrain::Status st = dtrain::launcher::ParseHostfileText(file, "rendered", &back);
  DT_FUZZ_ASSERT(st.ok() && SameHosts(hosts, back), "hostfile round trip: " + st.ToString() + "\n" + file);
  st = dtrain::launcher::ParseHostList(list, &back);
  DT_FUZZ_ASSERT(st.ok() && SameHosts(hosts, back), "--hosts round trip: " + st.ToString() + "\n" + list);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<HostSlots> hosts;
  if (dtrain::launcher::ParseHostfileText(text, "fuzz.hostfile", &hosts).ok()) CheckHosts(hosts);
  if (dtrain::launcher::ParseHostList(text, &hosts).ok()) CheckHosts(hosts);
  int n = 0;
  if (dtrain::launcher::ParsePositiveInt(text, &n)) {
    const bool digits = text.find_first_not_of("0123456789") == std::string::npos;
    DT_FUZZ_ASSERT(digits && n >= 1 && n <= 1000000 && std::stol(text) == n,
                   "ParsePositiveInt('" + text + "') = " + std::to_string(n));
  }
  return 0;
}
