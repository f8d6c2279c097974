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
#include "data/tokenizer.h"

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

namespace {

// Cuts tokens [begin, end) of `tokens` into records of seq_len + 1 and writes them as the dataset `dir`.
Status WriteTokenRecords(const std::vector<int32_t>& tokens, size_t begin, size_t end, const std::string& dir,
                         const proto::DatasetSchema& schema, const TextConvertOptions& opts, const std::string& source,
                         int64_t* records, int64_t* dropped) {
  const int64_t len = opts.seq_len + 1, total = static_cast<int64_t>(end - begin);
  std::unique_ptr<DatasetWriter> w;
  DT_RETURN_IF_ERROR(DatasetWriter::Create(dir, schema, opts.samples_per_shard, &w));
  *records = (total - 1) / opts.seq_len;  // record r covers [r*seq_len, r*seq_len + len)
  const size_t tok_bytes = schema.token_dtype() == proto::DatasetSchema::UINT32 ? 4 : 2;
  std::vector<uint8_t> rec(static_cast<size_t>(len) * tok_bytes);
  for (int64_t r = 0; r < *records; ++r) {
    for (int64_t j = 0; j < len; ++j) {
      const auto tok = static_cast<uint32_t>(tokens[begin + r * opts.seq_len + j]);
      std::memcpy(rec.data() + j * tok_bytes, &tok, tok_bytes);  // little-endian: low bytes first
    }
    DT_RETURN_IF_ERROR(w->Add(rec.data(), rec.size()));
  }
  *dropped = total - (*records * opts.seq_len + 1);
  return w->Finish(source, nullptr);
}

}  // namespace

Status ConvertText(const std::vector<std::string>& files, const std::string& out_dir, const TextConvertOptions& opts,
                   TextConvertResult* result) {
  DT_CHECK_ARG(!files.empty(), "convert-text: no input files");
  DT_CHECK_ARG(opts.seq_len >= 1, "seq_len must be >= 1, got " << opts.seq_len);
  DT_CHECK_ARG(opts.val_fraction >= 0 && opts.val_fraction < 1,
               "convert-text: --val-fraction must be in [0, 1), got " << opts.val_fraction);
  std::unique_ptr<Tokenizer> tok;
  if (opts.tokenizer.empty()) {
    tok = MakeByteTokenizer();
  } else {
    DT_RETURN_IF_ERROR(OpenTokenizer(opts.tokenizer, &tok).WithContext("--tokenizer"));
  }
  const int64_t vocab = tok->vocab_size();
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::TOKENS);
  schema.add_dims(opts.seq_len + 1);
  schema.set_token_dtype(opts.dtype != proto::DatasetSchema::TOKEN_DTYPE_UNSPECIFIED ? opts.dtype
                         : vocab <= 65536                                            ? proto::DatasetSchema::UINT16
                                                                                     : proto::DatasetSchema::UINT32);
  if (schema.token_dtype() == proto::DatasetSchema::UINT16 && vocab > 65536) {
    return Status::InvalidArgument("convert-text: --dtype uint16 cannot hold the tokenizer's " + std::to_string(vocab) +
                                   " ids: use uint32 (or leave --dtype out)");
  }
  schema.set_vocab_size(vocab);
  *schema.mutable_tokenizer() = tok->info();

  std::vector<int32_t> tokens;
  for (const auto& f : files) {
    std::string text;
    DT_RETURN_IF_ERROR(ReadInput(f, &text));
    DT_RETURN_IF_ERROR(tok->Encode(text, &tokens).WithContext(f));
    if (tok->info().eot_token() >= 0) tokens.push_back(static_cast<int32_t>(tok->info().eot_token()));
  }
  const int64_t len = opts.seq_len + 1, total = static_cast<int64_t>(tokens.size());
  const bool split = opts.val_fraction > 0;
  const auto n_val = static_cast<int64_t>(static_cast<double>(total) * opts.val_fraction);
  const int64_t n_train = total - n_val;
  for (const auto& [n, what] : {std::pair{n_train, "training"}, std::pair{split ? n_val : len, "validation"}}) {
    if (n < len) {
      return Status::InvalidArgument("convert-text: " + std::to_string(n) + " " + what + " tokens (of " +
                                     std::to_string(total) + "), fewer than one record of " + std::to_string(len) +
                                     " tokens (lower --seq-len" + (split ? ", or change --val-fraction)" : ")"));
    }
  }
  std::string moved;
  DT_RETURN_IF_ERROR(PrepareDatasetDir(out_dir, opts.overwrite, files, &moved));
  if (!moved.empty()) DT_LOG_WARN(kData, "{}", moved);
  std::string source = tok->info().kind() + " tokens";
  if (!opts.tokenizer.empty()) source += " (tokenizer " + opts.tokenizer + ")";
  source += " of";
  for (const auto& f : files) source += " " + f;
  TextConvertResult r;
  r.tokens = total;
  r.schema = schema;
  int64_t dropped = 0;
  if (!split) {
    DT_RETURN_IF_ERROR(WriteTokenRecords(tokens, 0, tokens.size(), out_dir, schema, opts, source, &r.train_records,
                                         &r.dropped_tokens));
  } else {
    DT_RETURN_IF_ERROR(WriteTokenRecords(tokens, 0, n_train, out_dir + "/train", schema, opts,
                                         source + " (the first " + std::to_string(n_train) + " tokens)",
                                         &r.train_records, &r.dropped_tokens));
    DT_RETURN_IF_ERROR(WriteTokenRecords(tokens, n_train, tokens.size(), out_dir + "/val", schema, opts,
                                         source + " (the last " + std::to_string(n_val) + " tokens)", &r.val_records,
                                         &dropped));
    r.dropped_tokens += dropped;
  }
  if (result != nullptr) *result = std::move(r);
  return Status::OK();
}

}  // namespace dtrain::data
