#include "data/convert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/check.h"
#include "core/file_guard.h"
#include "core/logging.h"
#include "data/fashion_mnist.h"
#include "data/idx_reader.h"
#include "data/manifest.h"
#include "data/shard_writer.h"

namespace dtrain::data {
namespace {

// "<dir>/<base>.gz" unless only the plain file exists (as data/fashion_mnist.cc resolves them).
std::string IdxPath(const std::string& dir, const std::string& base) {
  std::error_code ec;
  const std::string gz = dir + "/" + base + ".gz", plain = dir + "/" + base;
  return (!std::filesystem::exists(gz, ec) && std::filesystem::exists(plain, ec)) ? plain : gz;
}

// Appends the whole of input file `f` to *text; errors name the file and the errno reason.
Status ReadInput(const std::string& f, std::string* text) {
  const int fd = ::open(f.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block (refused below)
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(f + ": input text file does not exist");
    return Status::InvalidArgument(f + ": cannot open the input text file: " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(f + ": is a directory (convert-text expects text FILES)");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return CheckRegularFile(f, "input text file");
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::InvalidArgument(f + ": cannot read the input text file: " + std::strerror(err));
    }
    text->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::OK();
}

}  // namespace

Status PrepareDatasetDir(const std::string& out_dir, bool overwrite, const std::vector<std::string>& inputs,
                         std::string* note) {
  if (note != nullptr) note->clear();
  for (const std::string& in : inputs) {
    if (PathWithin(in, out_dir)) {
      return Status::InvalidArgument("--out " + out_dir + " holds the input " + in +
                                     ": converting a dataset onto itself would replace its own input; give a new "
                                     "--out directory (--overwrite does not change this)");
    }
  }
  std::error_code ec;
  if (!std::filesystem::exists(out_dir, ec)) return Status::OK();
  if (!std::filesystem::is_directory(out_dir, ec)) {
    return Status::InvalidArgument(out_dir + ": exists and is not a directory (--out names the dataset directory)");
  }
  if (std::filesystem::is_empty(out_dir, ec)) return Status::OK();
  if (!overwrite) {
    return Status::InvalidArgument(out_dir + ": is not empty" +
                                   (std::filesystem::exists(ManifestPath(out_dir), ec) ? " (it holds a dataset)" : "") +
                                   ": give a new --out directory, or --overwrite to move it aside and write anew");
  }
  std::string moved;
  DT_RETURN_IF_ERROR(MoveAside(out_dir, &moved));
  if (note != nullptr) *note = "moved the existing " + out_dir + " aside to " + moved;
  return Status::OK();
}

Status ConvertFashionMnist(const std::string& src_dir, const std::string& split, const std::string& out_dir,
                           int64_t samples_per_shard, int64_t limit, proto::DatasetManifest* manifest) {
  DT_CHECK_ARG(split == "train" || split == "t10k", "split must be train or t10k, got '" << split << "'");
  const std::string images_path = IdxPath(src_dir, split + "-images-idx3-ubyte");
  const std::string labels_path = IdxPath(src_dir, split + "-labels-idx1-ubyte");
  IdxArray images, labels;
  DT_RETURN_IF_ERROR(ReadIdx(images_path, &images));
  DT_RETURN_IF_ERROR(ReadIdx(labels_path, &labels));
  if (images.dims.size() != 3) return Status::DataLoss(images_path + ": images must be 3-D");
  if (labels.dims.size() != 1) return Status::DataLoss(labels_path + ": labels must be 1-D");
  if (images.dims[0] != labels.dims[0]) {
    return Status::DataLoss(images_path + ": " + std::to_string(images.dims[0]) + " images but " + labels_path +
                            " has " + std::to_string(labels.dims[0]) + " labels");
  }
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::IMAGE);
  schema.add_dims(images.dims[1]);
  schema.add_dims(images.dims[2]);
  schema.set_has_label(true);
  schema.set_num_classes(kFashionMnistClasses);
  schema.set_pixel_mean(kFashionMnistMean);
  schema.set_pixel_std(kFashionMnistStd);
  std::unique_ptr<DatasetWriter> w;
  DT_RETURN_IF_ERROR(DatasetWriter::Create(out_dir, schema, samples_per_shard, &w));
  const int64_t n = limit > 0 ? std::min(limit, images.dims[0]) : images.dims[0];
  const size_t pixels = static_cast<size_t>(images.dims[1] * images.dims[2]);
  std::vector<uint8_t> rec(4 + pixels);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t label = labels.data[i];
    if (label >= static_cast<uint32_t>(kFashionMnistClasses)) {
      return Status::DataLoss(labels_path + ": label " + std::to_string(label) + " of sample " + std::to_string(i) +
                              " is outside [0, 9]");
    }
    std::memcpy(rec.data(), &label, 4);  // little-endian u32
    std::memcpy(rec.data() + 4, images.data.data() + i * pixels, pixels);
    DT_RETURN_IF_ERROR(w->Add(rec.data(), rec.size()));
  }
  return w->Finish("fashion-mnist " + split + " from " + src_dir, manifest);
}

Status ConvertText(const std::vector<std::string>& files, const std::string& out_dir, const TextConvertOptions& opts,
                   int64_t* dropped_tokens, proto::DatasetManifest* manifest) {
  DT_CHECK_ARG(!files.empty(), "convert-text: no input files");
  DT_CHECK_ARG(opts.seq_len >= 1, "seq_len must be >= 1, got " << opts.seq_len);
  std::string text;
  for (const auto& f : files) DT_RETURN_IF_ERROR(ReadInput(f, &text));
  const int64_t len = opts.seq_len + 1, total = static_cast<int64_t>(text.size());
  if (total < len) {
    return Status::InvalidArgument("convert-text: " + std::to_string(total) +
                                   " bytes of text, fewer than one record of " + std::to_string(len) +
                                   " tokens (lower --seq-len)");
  }
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::TOKENS);
  schema.add_dims(len);
  schema.set_token_dtype(opts.dtype);
  schema.set_vocab_size(256);
  std::string moved;
  DT_RETURN_IF_ERROR(PrepareDatasetDir(out_dir, opts.overwrite, files, &moved));
  if (!moved.empty()) DT_LOG_WARN(kData, "{}", moved);
  std::unique_ptr<DatasetWriter> w;
  DT_RETURN_IF_ERROR(DatasetWriter::Create(out_dir, schema, opts.samples_per_shard, &w));
  const int64_t records = (total - 1) / opts.seq_len;  // record r covers [r*seq_len, r*seq_len + len)
  const size_t tok_bytes = opts.dtype == proto::DatasetSchema::UINT32 ? 4 : 2;
  std::vector<uint8_t> rec(static_cast<size_t>(len) * tok_bytes);
  for (int64_t r = 0; r < records; ++r) {
    for (int64_t j = 0; j < len; ++j) {
      const uint32_t tok = static_cast<uint8_t>(text[r * opts.seq_len + j]);
      std::memcpy(rec.data() + j * tok_bytes, &tok, tok_bytes);  // little-endian: low bytes first
    }
    DT_RETURN_IF_ERROR(w->Add(rec.data(), rec.size()));
  }
  if (dropped_tokens != nullptr) *dropped_tokens = total - (records * opts.seq_len + 1);
  std::string source = "byte-level tokens of";
  for (const auto& f : files) source += " " + f;
  return w->Finish(source, manifest);
}

}  // namespace dtrain::data
