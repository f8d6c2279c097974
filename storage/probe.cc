#include "storage/probe.h"

#include <cstdio>
#include <random>
#include <vector>

namespace dtrain::storage {
namespace {

std::string RandomHex(std::mt19937_64* rng) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>((*rng)()));
  return buf;
}

}  // namespace

Status ProbeStorage(Storage* store, const std::string& prefix, bool need_write) {
  const std::string where = "storage preflight of " + store->url();
  std::vector<ObjectInfo> listed;
  Status st = store->List(prefix, &listed);
  if (!st.ok()) return st.WithContext(where + ": cannot list '" + prefix + "'");
  if (!need_write) return Status::OK();

  // Random names: several jobs (or a restarted one) may probe the same prefix at once.
  std::mt19937_64 rng(std::random_device{}());
  const std::string key = prefix + ".dtrain-probe-" + RandomHex(&rng);
  std::string payload = "dtrain storage probe ";
  while (payload.size() < 64) payload += RandomHex(&rng);
  payload.resize(64);

  st = store->Put(key, payload.data(), payload.size());
  if (!st.ok()) return st.WithContext(where + ": not writable (writing probe object '" + key + "')");

  std::string got;
  st = store->Get(key, &got);
  if (st.ok() && got != payload) {
    st = Status::DataLoss("read back " + std::to_string(got.size()) + " bytes that differ from the " +
                          std::to_string(payload.size()) + " written");
  }
  if (!st.ok()) {
    (void)store->Delete(key);  // best effort: the read failure is the error to report
    return st.WithContext(where + ": probe object '" + key + "' written but not read back");
  }
  st = store->Delete(key);
  if (!st.ok()) return st.WithContext(where + ": cannot delete probe object '" + key + "'");
  return Status::OK();
}

}  // namespace dtrain::storage
