#include "data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <utility>

#include "core/check.h"

namespace dtrain::data {
namespace {

constexpr int kMaxDims = 4;
constexpr size_t kChunkBytes = size_t{1} << 16;

std::string DimsString(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i];
  os << "]";
  return os.str();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Streams the decoded bytes of one file: inflated when it starts with the gzip magic, raw otherwise.
// Owns the FILE* and the zlib state; not copyable.
class ByteStream {
 public:
  explicit ByteStream(std::string path) : path_(std::move(path)), in_(kChunkBytes) {}
  ~ByteStream() {
    if (zs_open_) inflateEnd(&zs_);
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  Status Open() {
    file_.reset(std::fopen(path_.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      if (err == ENOENT) {
        return Status::NotFound(path_ +
                                ": no such file (Fashion-MNIST comes from Debian's dataset-fashion-mnist "
                                "package: apt-get install dataset-fashion-mnist)");
      }
      return Status::IoError(path_ + ": cannot open: " + std::strerror(err));
    }
    uint8_t magic[2] = {0, 0};
    const size_t n = std::fread(magic, 1, 2, file_.get());
    if (std::ferror(file_.get())) return Status::IoError(path_ + ": read failed: " + std::strerror(errno));
    std::rewind(file_.get());
    gzip_ = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      // 16 + MAX_WBITS: expect a gzip wrapper (zlib then checks its CRC32 and length trailer).
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) return Status::Internal(path_ + ": inflateInit2 failed");
      zs_open_ = true;
    }
    return Status::OK();
  }

  // Fills up to n bytes of dst; *got < n only when the data ends first.
  Status Read(uint8_t* dst, size_t n, size_t* got) {
    *got = 0;
    while (*got < n) {
      const size_t want = n - *got;
      size_t step = 0;
      DT_RETURN_IF_ERROR(gzip_ ? Inflate(dst + *got, want, &step) : ReadRaw(dst + *got, want, &step));
      if (step == 0) break;
      *got += step;
    }
    return Status::OK();
  }

  // After the payload: OK only if the data ended exactly here (no extra bytes, gzip stream complete).
  Status CheckAtEnd(int64_t payload_bytes) {
    uint8_t extra[1];
    size_t got = 0;
    DT_RETURN_IF_ERROR(Read(extra, 1, &got));
    if (got > 0) {
      return Status::DataLoss(path_ + ": trailing bytes after the " + std::to_string(payload_bytes) +
                              "-byte payload (the header dims disagree with the data size)");
    }
    if (gzip_ && !stream_end_) {
      return Status::DataLoss(path_ + ": gzip stream truncated (the file ends before the gzip trailer)");
    }
    if (gzip_ && (zs_.avail_in > 0 || std::fgetc(file_.get()) != EOF)) {
      return Status::DataLoss(path_ + ": trailing bytes after the end of the gzip stream");
    }
    return Status::OK();
  }

 private:
  Status ReadRaw(uint8_t* dst, size_t n, size_t* got) {
    *got = std::fread(dst, 1, n, file_.get());
    if (std::ferror(file_.get())) return Status::IoError(path_ + ": read failed: " + std::strerror(errno));
    return Status::OK();
  }

  Status Inflate(uint8_t* dst, size_t n, size_t* got) {
    *got = 0;
    if (stream_end_) return Status::OK();
    zs_.next_out = dst;
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, kChunkBytes * 256));
    const uInt asked = zs_.avail_out;
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0) {
        const size_t r = std::fread(in_.data(), 1, in_.size(), file_.get());
        if (std::ferror(file_.get())) return Status::IoError(path_ + ": read failed: " + std::strerror(errno));
        if (r == 0) break;  // compressed input ended before the stream did: truncated (see CheckAtEnd)
        zs_.next_in = in_.data();
        zs_.avail_in = static_cast<uInt>(r);
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        stream_end_ = true;
        break;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return Status::DataLoss(path_ + ": corrupt gzip stream: " + (zs_.msg ? zs_.msg : zError(rc)));
      }
    }
    *got = asked - zs_.avail_out;
    return Status::OK();
  }

  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  bool gzip_ = false;
  z_stream zs_{};
  bool zs_open_ = false;
  bool stream_end_ = false;
  std::vector<uint8_t> in_;
};

}  // namespace

Status ReadIdx(const std::string& path, IdxArray* out) {
  *out = IdxArray();
  ByteStream in(path);
  DT_RETURN_IF_ERROR(in.Open());

  uint8_t magic[4];
  size_t got = 0;
  DT_RETURN_IF_ERROR(in.Read(magic, 4, &got));
  if (got < 4) {
    return Status::DataLoss(path + ": truncated IDX header: expected 4 magic bytes, got " + std::to_string(got));
  }
  const uint32_t m = BigEndian32(magic);
  const int ndims = magic[3];
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || ndims < 1 || ndims > kMaxDims) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", m);
    return Status::DataLoss(path + ": bad IDX magic " + hex +
                            ": expected 0x0000080N (unsigned bytes, N = 1..4 dims; 0x00000801 labels, "
                            "0x00000803 images)");
  }

  uint8_t dim_bytes[4 * kMaxDims];
  DT_RETURN_IF_ERROR(in.Read(dim_bytes, 4 * ndims, &got));
  if (got < size_t(4 * ndims)) {
    return Status::DataLoss(path + ": truncated IDX header: expected " + std::to_string(4 * ndims) +
                            " dim bytes, got " + std::to_string(got));
  }
  std::vector<int64_t> dims(ndims);
  int64_t total = 1;
  bool over_cap = false;
  for (int i = 0; i < ndims; ++i) {
    dims[i] = BigEndian32(dim_bytes + 4 * i);
    // dims[i] < 2^32 and total <= 2^30 before the multiply, so this cannot overflow int64.
    if (!over_cap) total *= dims[i];
    over_cap = over_cap || total > kMaxIdxPayloadBytes;
  }
  if (over_cap) {
    return Status::DataLoss(path + ": IDX header dims " + DimsString(dims) + " exceed the " +
                            std::to_string(kMaxIdxPayloadBytes) + "-byte payload cap (corrupt header?)");
  }

  std::vector<uint8_t> data(static_cast<size_t>(total));
  DT_RETURN_IF_ERROR(in.Read(data.data(), data.size(), &got));
  if (got < data.size()) {
    return Status::DataLoss(path + ": truncated IDX payload: dims " + DimsString(dims) + " need " +
                            std::to_string(total) + " bytes, got " + std::to_string(got));
  }
  DT_RETURN_IF_ERROR(in.CheckAtEnd(total));

  out->dims = std::move(dims);
  out->data = std::move(data);
  return Status::OK();
}

}  // namespace dtrain::data
