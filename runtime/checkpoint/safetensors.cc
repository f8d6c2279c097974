#include "runtime/checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/bf16.h"
#include "core/check.h"
#include "core/file_guard.h"

namespace dtrain::runtime {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

// A shape or offset list: non-negative integers only (nlohmann keeps them as exact uint64).
bool UintArray(const nlohmann::ordered_json& j, std::vector<uint64_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const auto& v : j) {
    if (!v.is_number_unsigned()) return false;
    out->push_back(v.get<uint64_t>());
  }
  return true;
}

// Bytes per element of the dtypes read, 0 for the others.
uint64_t ElementBytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

// IEEE half to float32, exact for every value (subnormals are normalised; inf and NaN keep their payload).
float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);  // rebias 15 -> 127
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: shift the mantissa up until its leading 1 is the implicit bit
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// `numel` elements of `dtype` (little-endian) at `src` as float32 into `dst`.
void ToF32(const std::string& dtype, const char* src, uint64_t numel, float* dst) {
  if (dtype == "F32") {
    std::memcpy(dst, src, numel * sizeof(float));
    return;
  }
  const bool bf16 = dtype == "BF16";
  for (uint64_t i = 0; i < numel; ++i) {
    const uint16_t h = static_cast<uint16_t>(static_cast<unsigned char>(src[2 * i]) |
                                             (static_cast<unsigned char>(src[2 * i + 1]) << 8));
    dst[i] = bf16 ? Bf16BitsToF32(h) : F16ToF32(h);
  }
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  for (const NamedTensor& nt : tensors) {  // (a negative dim is refused by name in the streamed write)
    int64_t numel = 1;
    for (int64_t d : nt.shape) numel *= d;
    const bool negative = std::any_of(nt.shape.begin(), nt.shape.end(), [](int64_t d) { return d < 0; });
    DT_CHECK_ARG(negative || numel == static_cast<int64_t>(nt.data.size()),
                 "tensor '" << nt.name << "' shape does not match data");
  }
  auto fill = [&](size_t t, float* dst) {
    std::copy(tensors[t].data.begin(), tensors[t].data.end(), dst);  // (memcpy may not take an empty vector's null)
    return Status::OK();
  };
  return WriteSafetensors(path, tensors, fill, metadata);
}

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::function<Status(size_t t, float* dst)>& fill,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  std::vector<int64_t> numels;
  int64_t largest = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const NamedTensor& nt = tensors[t];
    int64_t numel = 1;
    // The reader (and safetensors itself) takes "__metadata__" for the metadata map, and dims are sizes.
    DT_CHECK_ARG(nt.name != "__metadata__", "tensor name '__metadata__' is reserved for the metadata map");
    // A JSON object with a key twice: readers keep one of the two (Python's json the last), silently.
    DT_CHECK_ARG(names.insert(nt.name).second,
                 "duplicate tensor name '" << nt.name << "' (tensor " << t << " of " << tensors.size() << ")");
    for (int64_t d : nt.shape) {
      DT_CHECK_ARG(d >= 0, "tensor '" << nt.name << "' has a negative dim " << d);
      numel *= d;
    }
    numels.push_back(numel);
    largest = std::max(largest, numel);
    const uint64_t end = offset + static_cast<uint64_t>(numel) * sizeof(float);
    header[nt.name] = {{"dtype", "F32"}, {"shape", nt.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();  // strict: a name or metadata string that is not UTF-8 is refused, as JSON requires
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument("safetensors '" + path + "': a tensor name or metadata entry is not UTF-8 (" +
                                   e.what() + ")");
  }
  while (text.size() % 8 != 0) text += ' ';  // the spec pads the header to 8 bytes with spaces

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IoError("cannot create '" + tmp + "': " + std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  uint64_t len = text.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(len >> (8 * i));
  bool ok = write_all(len_le, 8) && write_all(text.data(), text.size());
  std::vector<float> buf(static_cast<size_t>(largest));
  Status filled;
  for (size_t t = 0; t < tensors.size() && ok; ++t) {
    filled = fill(t, buf.data());
    ok = filled.ok() && write_all(buf.data(), static_cast<size_t>(numels[t]) * sizeof(float));
  }
  ok = ok && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!filled.ok()) {
    std::remove(tmp.c_str());
    return filled.WithContext("writing '" + path + "'");
  }
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("writing '" + path + "': " + std::strerror(ok ? errno : saved));
  }
  return Status::OK();
}

Status ReadSafetensors(const std::string& path, std::vector<NamedTensor>* tensors) {
  // A directory (model.init_from naming an export directory) used to read as "shorter than 8 bytes"; a FIFO would
  // block the open.
  const Status regular = CheckRegularFile(path, "safetensors file");
  if (regular.code() == Status::Code::kInvalidArgument) return regular;
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot open safetensors file '" + path + "'");
  f.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  unsigned char len_le[8];
  if (size < 8 || !f.read(reinterpret_cast<char*>(len_le), 8)) return Status::DataLoss(path + ": shorter than 8 bytes");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_le[i];
  if (len > kMaxHeaderBytes || len > size - 8) {
    return Status::DataLoss(path + ": header length " + std::to_string(len) + " exceeds the file size " +
                            std::to_string(size));
  }
  std::string header(len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(len));
  const uint64_t data_bytes = size - 8 - len;
  std::vector<char> data(data_bytes);
  if (!f.read(data.data(), static_cast<std::streamsize>(data_bytes))) return Status::DataLoss(path + ": short read");

  // A key twice in the top-level object is refused (nlohmann would keep the last one silently).
  std::set<std::string> names;
  bool repeated = false;
  std::string repeated_name;
  const auto on_event = [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& j) {
    if (depth == 1 && event == nlohmann::ordered_json::parse_event_t::key &&
        !names.insert(j.get<std::string>()).second) {
      repeated = true;
      repeated_name = j.get<std::string>();
    }
    return true;
  };
  const nlohmann::ordered_json root = nlohmann::ordered_json::parse(header, on_event, /*allow_exceptions=*/false);
  const Status bad = Status::DataLoss(path + ": malformed safetensors header");
  if (root.is_discarded() || !root.is_object()) return bad;
  if (repeated) return Status::DataLoss(path + ": tensor '" + repeated_name + "' appears twice");
  tensors->clear();
  // ordered_json: tensors come back in the header's order, as written.
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad;
      for (const auto& kv : entry) {
        if (!kv.is_string()) return bad;
      }
      continue;
    }
    if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") || !entry["dtype"].is_string()) return bad;
    const std::string dtype = entry["dtype"].get<std::string>();
    std::vector<uint64_t> shape, offsets;
    if (!entry.contains("shape") || !UintArray(entry["shape"], &shape)) return bad;
    if (!entry.contains("data_offsets") || !UintArray(entry["data_offsets"], &offsets)) return bad;
    const uint64_t element = ElementBytes(dtype);
    if (element == 0) {
      return Status::InvalidArgument(path + ": tensor '" + name + "' has dtype " + dtype + ", want F32, BF16 or F16");
    }
    NamedTensor nt;
    nt.name = name;
    uint64_t numel = 1;
    for (uint64_t d : shape) {
      if (d > (uint64_t{1} << 40) || (d > 0 && numel > (uint64_t{1} << 40) / d)) return bad;
      numel *= d;
      nt.shape.push_back(static_cast<int64_t>(d));
    }
    if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_bytes ||
        offsets[1] - offsets[0] != numel * element) {
      return Status::DataLoss(path + ": tensor '" + name + "' offsets do not match its shape or the file size");
    }
    nt.data.resize(numel);
    if (numel > 0) ToF32(dtype, data.data() + offsets[0], numel, nt.data.data());  // numel 0: no buffer
    tensors->push_back(std::move(nt));
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
