#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/metrics.h"

namespace dtrain::runtime {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// A tiny scanner for the JSON subset safetensors headers use: objects, arrays of integers, strings.
class JsonScanner {
 public:
  explicit JsonScanner(const std::string& s) : s_(s) {}
  void Ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Eat(char c) {
    Ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  // A JSON string with its escapes decoded (\uXXXX, surrogate pairs too, to UTF-8): what JsonQuote
  // writes for control characters in a name must read back as the same bytes.
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    out->clear();
    while (i_ < s_.size() && s_[i_] != '"') {
      const char c = s_[i_++];
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i_ == s_.size()) return false;
      const char e = s_[i_++];
      const char* kFrom = "\"\\/bfnrt";
      const char* kTo = "\"\\/\b\f\n\r\t";
      if (const char* p = e != '\0' ? std::strchr(kFrom, e) : nullptr) {
        out->push_back(kTo[p - kFrom]);
        continue;
      }
      uint32_t cp = 0, low = 0;
      if (e != 'u' || !Hex4(&cp) || (cp >= 0xdc00 && cp <= 0xdfff)) return false;
      if (cp >= 0xd800 && cp <= 0xdbff) {  // a surrogate pair: the low half must follow
        if (s_.compare(i_, 2, "\\u") != 0) return false;
        i_ += 2;
        if (!Hex4(&low) || low < 0xdc00 || low > 0xdfff) return false;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
      }
      AppendUtf8(cp, out);
    }
    return Eat('"');
  }
  bool Hex4(uint32_t* out) {
    if (s_.size() - i_ < 4) return false;
    *out = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
      *out = *out * 16 +
             static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return true;
  }
  bool Int(int64_t* out) {
    Ws();
    size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == start || i_ - start > 18) return false;
    *out = std::stoll(s_.substr(start, i_ - start));
    return true;
  }
  bool IntArray(std::vector<int64_t>* out) {
    out->clear();
    if (!Eat('[')) return false;
    if (Eat(']')) return true;
    do {
      int64_t v;
      if (!Int(&v)) return false;
      out->push_back(v);
    } while (Eat(','));
    return Eat(']');
  }
  // Skips a string-to-string object (the metadata).
  bool SkipStringMap() {
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    std::string k, v;
    do {
      if (!String(&k) || !Eat(':') || !String(&v)) return false;
    } while (Eat(','));
    return Eat('}');
  }
  bool AtEnd() {
    Ws();
    return i_ == s_.size();
  }

 private:
  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + JsonQuote(k) + ":" + JsonQuote(v);
      first = false;
    }
    header += tensors.empty() ? "}" : "},";  // no comma before the closing brace: that is not JSON
  }
  uint64_t offset = 0;
  std::set<std::string> names;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const NamedTensor& nt = tensors[t];
    int64_t numel = 1;
    std::string shape;
    // The reader (and safetensors itself) takes "__metadata__" for the metadata map, and dims are sizes.
    DT_CHECK_ARG(nt.name != "__metadata__", "tensor name '__metadata__' is reserved for the metadata map");
    // A JSON object with a key twice: readers keep one of the two (Python's json the last), silently.
    DT_CHECK_ARG(names.insert(nt.name).second,
                 "duplicate tensor name '" << nt.name << "' (tensor " << t << " of " << tensors.size() << ")");
    for (size_t i = 0; i < nt.shape.size(); ++i) {
      DT_CHECK_ARG(nt.shape[i] >= 0, "tensor '" << nt.name << "' has a negative dim " << nt.shape[i]);
      numel *= nt.shape[i];
      shape += (i ? "," : "") + std::to_string(nt.shape[i]);
    }
    DT_CHECK_ARG(numel == static_cast<int64_t>(nt.data.size()), "tensor '" << nt.name << "' shape does not match data");
    const uint64_t end = offset + nt.data.size() * sizeof(float);
    header += (t ? "," : "") + JsonQuote(nt.name) + ":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // the spec pads the header to 8 bytes with spaces

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
  uint64_t len = header.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(len >> (8 * i));
  bool ok = write_all(len_le, 8) && write_all(header.data(), header.size());
  for (const NamedTensor& nt : tensors) ok = ok && write_all(nt.data.data(), nt.data.size() * sizeof(float));
  ok = ok && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("writing '" + path + "': " + std::strerror(ok ? errno : saved));
  }
  return Status::OK();
}

Status ReadSafetensors(const std::string& path, std::vector<NamedTensor>* tensors) {
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

  JsonScanner js(header);
  tensors->clear();
  std::set<std::string> names;
  const Status bad = Status::DataLoss(path + ": malformed safetensors header");
  if (!js.Eat('{')) return bad;
  if (!js.Eat('}')) {
    do {
      std::string name, key, dtype;
      if (!js.String(&name) || !js.Eat(':')) return bad;
      if (name == "__metadata__") {
        if (!js.SkipStringMap()) return bad;
        continue;
      }
      if (!names.insert(name).second) return Status::DataLoss(path + ": tensor '" + name + "' appears twice");
      NamedTensor nt;
      nt.name = name;
      std::vector<int64_t> offsets;
      if (!js.Eat('{')) return bad;
      do {
        if (!js.String(&key) || !js.Eat(':')) return bad;
        if (key == "dtype") {
          if (!js.String(&dtype)) return bad;
        } else if (key == "shape") {
          if (!js.IntArray(&nt.shape)) return bad;
        } else if (key == "data_offsets") {
          if (!js.IntArray(&offsets)) return bad;
        } else {
          return bad;
        }
      } while (js.Eat(','));
      if (!js.Eat('}')) return bad;
      if (dtype != "F32")
        return Status::InvalidArgument(path + ": tensor '" + name + "' has dtype " + dtype + ", want F32");
      int64_t numel = 1;
      for (int64_t d : nt.shape) {
        if (d < 0 || d > (int64_t{1} << 40) || (d > 0 && numel > (int64_t{1} << 40) / d)) return bad;
        numel *= d;
      }
      if (offsets.size() != 2 || offsets[0] > offsets[1] || static_cast<uint64_t>(offsets[1]) > data_bytes ||
          offsets[1] - offsets[0] != numel * static_cast<int64_t>(sizeof(float))) {
        return Status::DataLoss(path + ": tensor '" + name + "' offsets do not match its shape or the file size");
      }
      nt.data.resize(numel);
      if (numel > 0) std::memcpy(nt.data.data(), data.data() + offsets[0], numel * sizeof(float));  // [0]: no buffer
      tensors->push_back(std::move(nt));
    } while (js.Eat(','));
    if (!js.Eat('}')) return bad;
  }
  if (!js.AtEnd()) return bad;
  return Status::OK();
}

}  // namespace dtrain::runtime
