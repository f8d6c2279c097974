#include "data/import_tokens.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "core/check.h"
#include "core/file_guard.h"
#include "core/logging.h"
#include "data/convert.h"
#include "data/shard_writer.h"

namespace dtrain::data {
namespace {

// llm.c's token shards (dev/data/data_common.py, HEADERS_INFO and write_datafile): a header of 256 little-endian
// int32 — [0] magic, [1] version, [2] token count — then the tokens. These two are all llm.c writes.
struct LlmcFormat {
  int32_t magic;
  int32_t version;
  size_t width;  // bytes per token
};
constexpr LlmcFormat kLlmcFormats[] = {{20240520, 1, 2}, {20240801, 7, 4}};
constexpr char kLlmcKnown[] =
    "known: magic 20240520 version 1 (GPT-2, uint16 tokens) and magic 20240801 version 7 (Llama 3, uint32 tokens)";
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);
constexpr int64_t kLlama3Vocab = 128256;

bool IsLlmcMagic(int32_t magic) {
  for (const LlmcFormat& f : kLlmcFormats) {
    if (f.magic == magic) return true;
  }
  return false;
}

const LlmcFormat* FindLlmcFormat(int32_t magic, int32_t version) {
  for (const LlmcFormat& f : kLlmcFormats) {
    if (f.magic == magic && f.version == version) return &f;
  }
  return nullptr;
}

// One input file opened at its first token: the width of its tokens, how many there are, and the byte offset of the
// first one (the header's size).
struct TokenFile {
  std::ifstream in;
  size_t width = 2;
  int64_t count = 0;
  int64_t first_byte = 0;
};

// A raw-looking file (no llm.c magic) whose first 1024 bytes are an llm.c header with a damaged magic: the magic is
// a few bits off one of llm.c's, or a known version and token count fit the file's size exactly. Raw uint16 tokens
// almost never do either; importing such a header as 512 tokens would hide the damage.
bool LooksLikeDamagedLlmcHeader(const int32_t* header, int64_t size) {
  for (const LlmcFormat& f : kLlmcFormats) {
    if (__builtin_popcount(static_cast<uint32_t>(header[0] ^ f.magic)) <= 4) return true;
    if (header[1] == f.version && header[2] >= 0 &&
        static_cast<int64_t>(kLlmcHeaderBytes) + header[2] * static_cast<int64_t>(f.width) == size) {
      return true;
    }
  }
  return false;
}

std::string HeaderValues(const int32_t* header) {
  return "magic " + std::to_string(header[0]) + ", version " + std::to_string(header[1]) + ", " +
         std::to_string(header[2]) + " tokens";
}

Status Open(const std::string& path, const std::string& format, TokenFile* f) {
  const Status regular = CheckRegularFile(path, "token file");  // a FIFO would block the open
  if (regular.code() == Status::Code::kInvalidArgument) return regular;
  f->in.open(path, std::ios::binary);
  if (!f->in) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": token file does not exist");
    return Status::IoError(path + ": cannot open: " + std::strerror(err));
  }
  f->in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(f->in.tellg());
  f->in.seekg(0);
  int32_t header[256] = {};
  const int64_t head = std::min<int64_t>(size, kLlmcHeaderBytes);
  if (!f->in.read(reinterpret_cast<char*>(header), head)) return Status::IoError(path + ": read failed");
  const bool whole_header = size >= static_cast<int64_t>(kLlmcHeaderBytes);
  const bool magic = size >= 4 && IsLlmcMagic(header[0]);
  if (format == "auto" && !magic && whole_header && LooksLikeDamagedLlmcHeader(header, size)) {
    return Status::DataLoss(path + ": starts like an llm.c token shard whose header is damaged (" +
                            HeaderValues(header) + "; " + kLlmcKnown +
                            "); --format raw imports it as raw uint16 tokens if that is what it is");
  }
  if (format == "llmc" || (format == "auto" && magic)) {
    if (!whole_header) {
      return Status::DataLoss(path + ": llm.c token shard cut short: " + std::to_string(size) +
                              " bytes, less than its 1024-byte header");
    }
    const LlmcFormat* known = FindLlmcFormat(header[0], header[1]);
    if (known == nullptr) {
      return Status::InvalidArgument(path + ": not an llm.c token shard this import knows: its header has " +
                                     HeaderValues(header) + " (" + kLlmcKnown + ")");
    }
    f->width = known->width;
    f->count = header[2];
    f->first_byte = kLlmcHeaderBytes;
    const int64_t want = static_cast<int64_t>(kLlmcHeaderBytes) + f->count * static_cast<int64_t>(f->width);
    if (f->count < 0 || want != size) {
      return Status::DataLoss(path + ": llm.c header says " + std::to_string(header[2]) + " tokens of " +
                              std::to_string(f->width) + " bytes (" + std::to_string(want) +
                              " bytes in all) but the file has " + std::to_string(size) + " bytes");
    }
    f->in.seekg(kLlmcHeaderBytes);
    return Status::OK();
  }
  if (size % 2 != 0)
    return Status::DataLoss(path + ": " + std::to_string(size) + " bytes is not a whole number of uint16 tokens");
  f->width = 2;
  f->count = size / 2;
  f->first_byte = 0;
  f->in.clear();
  f->in.seekg(0);
  return Status::OK();
}

}  // namespace

Status ImportTokens(const std::vector<std::string>& files, const std::string& out_dir, const ImportTokensOptions& opts,
                    int64_t* dropped_tokens, proto::DatasetManifest* manifest) {
  DT_CHECK_ARG(!files.empty(), "import-tokens: no input files");
  DT_CHECK_ARG(opts.format == "auto" || opts.format == "raw" || opts.format == "llmc",
               "import-tokens: --format " << opts.format << " (expected auto, raw or llmc)");
  DT_CHECK_ARG(opts.seq_len >= 1, "seq_len must be >= 1, got " << opts.seq_len);
  DT_CHECK_ARG(opts.vocab_size >= 2 && opts.vocab_size <= (int64_t{1} << 32),
               "vocab_size must be in [2, 2^32], got " << opts.vocab_size);
  // Count first, so that a stream shorter than one record writes nothing.
  std::vector<std::unique_ptr<TokenFile>> inputs;
  int64_t total = 0;
  for (const auto& path : files) {
    inputs.push_back(std::make_unique<TokenFile>());
    DT_RETURN_IF_ERROR(Open(path, opts.format, inputs.back().get()));
    total += inputs.back()->count;
  }
  const int64_t len = opts.seq_len + 1;
  if (total < len) {
    return Status::InvalidArgument("import-tokens: " + std::to_string(total) + " tokens, fewer than one record of " +
                                   std::to_string(len) + " (lower --seq-len)");
  }
  std::string moved;
  DT_RETURN_IF_ERROR(PrepareDatasetDir(out_dir, opts.overwrite, files, &moved));
  if (!moved.empty()) DT_LOG_WARN(kData, "{}", moved);
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::TOKENS);
  schema.add_dims(len);
  const bool wide = opts.vocab_size > 65536;
  schema.set_token_dtype(wide ? proto::DatasetSchema::UINT32 : proto::DatasetSchema::UINT16);
  schema.set_vocab_size(opts.vocab_size);
  std::unique_ptr<DatasetWriter> w;
  DT_RETURN_IF_ERROR(DatasetWriter::Create(out_dir, schema, opts.samples_per_shard, &w));

  // Records overlap by one token: record r is tokens [r * seq_len, r * seq_len + len) of the stream.
  const size_t out_width = wide ? 4 : 2;
  std::vector<uint32_t> window;  // the current record's tokens read so far
  window.reserve(len);
  std::vector<uint8_t> rec(static_cast<size_t>(len) * out_width);
  std::vector<char> buf(1 << 20);
  int64_t records = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TokenFile& f = *inputs[i];
    int64_t left = f.count, index = 0;
    while (left > 0) {
      const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(buf.size() / f.width));
      if (!f.in.read(buf.data(), n * static_cast<int64_t>(f.width))) return Status::IoError(files[i] + ": read failed");
      for (int64_t k = 0; k < n; ++k, ++index) {
        uint32_t tok = 0;
        std::memcpy(&tok, buf.data() + k * f.width, f.width);  // little-endian
        if (tok >= opts.vocab_size) {
          const int64_t offset = f.first_byte + index * static_cast<int64_t>(f.width);
          std::string hint;
          if (f.width == 4 && opts.vocab_size < kLlama3Vocab && tok < kLlama3Vocab) {
            hint = " (an llm.c Llama 3 shard: Llama 3's vocabulary is 128256, --vocab-size 128256)";
          }
          return Status::InvalidArgument(files[i] + ": token " + std::to_string(index) + " (byte offset " +
                                         std::to_string(offset) + ") is " + std::to_string(tok) +
                                         ", not below --vocab-size " + std::to_string(opts.vocab_size) + hint);
        }
        window.push_back(tok);
        if (static_cast<int64_t>(window.size()) == len) {
          for (int64_t j = 0; j < len; ++j) std::memcpy(rec.data() + j * out_width, &window[j], out_width);
          DT_RETURN_IF_ERROR(w->Add(rec.data(), rec.size()));
          ++records;
          window.erase(window.begin(), window.begin() + opts.seq_len);  // keep the shared last token
        }
      }
      left -= n;
    }
  }
  if (dropped_tokens != nullptr) *dropped_tokens = total - (records * opts.seq_len + 1);
  std::string source = "tokens of";
  for (const auto& f : files) source += " " + f;
  return w->Finish(source, manifest);
}

}  // namespace dtrain::data
