// Fuzzes safetensors I/O (runtime/checkpoint/safetensors.h). The first byte picks the mode:
//   'R' + bytes   the bytes are a .safetensors file: ReadSafetensors must return a Status (no crash,
//                 leak or hang), and what it accepts has data sized by its shape and unique names.
//   otherwise     a write -> read round trip: tensors (names, shapes, float bits, NaNs included) and
//                 metadata drawn from the input; WriteSafetensors must refuse a repeated name, and
//                 when it accepts them, ReadSafetensors must give back the same names, shapes and
//                 bit-identical data, in order.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/safetensors.h"

namespace {

using dtrain::runtime::NamedTensor;

// `s` with bytes outside printable ASCII as \xHH, for failure messages.
std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
    out += buf;
  }
  return out;
}

// "'name' [2,3]; ...", for failure messages.
std::string Describe(const std::vector<NamedTensor>& tensors) {
  std::string out;
  for (const NamedTensor& t : tensors) {
    out += "'" + Escape(t.name) + "' [";
    for (size_t i = 0; i < t.shape.size(); ++i) out += (i ? "," : "") + std::to_string(t.shape[i]);
    out += "]; ";
  }
  return out;
}

void FuzzRead(const uint8_t* bytes, size_t size) {
  const std::string path = dtrain::fuzz::ScratchDir().Write("read.safetensors", bytes, size);
  std::vector<NamedTensor> tensors;
  if (!dtrain::runtime::ReadSafetensors(path, &tensors).ok()) return;
  std::set<std::string> names;
  for (const NamedTensor& t : tensors) {
    DT_FUZZ_ASSERT(names.insert(t.name).second, "read a file naming '" + Escape(t.name) + "' twice");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      DT_FUZZ_ASSERT(d >= 0, "negative dim in '" + t.name + "'");
      numel *= d;
    }
    DT_FUZZ_ASSERT(numel == static_cast<int64_t>(t.data.size()), "data of '" + t.name + "' does not fit its shape");
    DT_FUZZ_ASSERT(t.data.size() * sizeof(float) <= size, "more data than the file holds");
  }
}

void FuzzRoundTrip(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider in(bytes, size);
  std::map<std::string, std::string> metadata;
  for (int i = in.ConsumeIntegralInRange(0, 3); i > 0; --i) {
    std::string key = in.ConsumeRandomLengthString(16);
    metadata[key] = in.ConsumeRandomLengthString(16);
  }
  std::vector<NamedTensor> tensors(in.ConsumeIntegralInRange(0, 6));
  for (NamedTensor& t : tensors) {
    t.name = in.ConsumeRandomLengthString(24);
    int64_t numel = 1;
    for (int r = in.ConsumeIntegralInRange(0, 3); r > 0; --r) {
      t.shape.push_back(in.ConsumeIntegralInRange<int64_t>(-1, 6));
      numel *= t.shape.back();
    }
    const std::vector<uint8_t> raw = in.ConsumeBytes<uint8_t>(numel > 0 ? numel * sizeof(float) : 0);
    t.data.assign(numel > 0 ? numel : 0, 0.0f);
    if (!raw.empty()) std::memcpy(t.data.data(), raw.data(), raw.size());
  }
  const std::string path = dtrain::fuzz::ScratchDir().Path("roundtrip.safetensors");
  std::set<std::string> names;
  bool repeated = false;
  for (const NamedTensor& t : tensors) repeated |= !names.insert(t.name).second;
  const dtrain::Status written = dtrain::runtime::WriteSafetensors(path, tensors, metadata);
  DT_FUZZ_ASSERT(!(repeated && written.ok()), "wrote tensors with a repeated name: " + Describe(tensors));
  if (!written.ok()) return;
  std::vector<NamedTensor> back;
  const dtrain::Status st = dtrain::runtime::ReadSafetensors(path, &back);
  DT_FUZZ_ASSERT(st.ok(), "a file just written does not read: " + st.ToString() + "\nwritten: " + Describe(tensors));
  DT_FUZZ_ASSERT(back.size() == tensors.size(), "tensor count " + std::to_string(back.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& a = tensors[i];
    const NamedTensor& b = back[i];
    DT_FUZZ_ASSERT(a.name == b.name, "name '" + Escape(a.name) + "' read back as '" + Escape(b.name) + "'");
    DT_FUZZ_ASSERT(a.shape == b.shape, "shape of '" + Escape(a.name) + "'");
    const bool same_bits = a.data.size() == b.data.size() &&
                           (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * 4) == 0);
    DT_FUZZ_ASSERT(same_bits, "data of '" + Escape(a.name) + "'");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size > 0 && bytes[0] == 'R') {
    FuzzRead(bytes + 1, size - 1);
  } else {
    FuzzRoundTrip(bytes, size);
  }
  return 0;
}
