#include "data/sentencepiece_tokenizer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/file_guard.h"

extern char** environ;

namespace dtrain::data {
namespace {

// A private directory under $TMPDIR (or /tmp) for one tool run's files, removed with everything in it.
class ScratchDir {
 public:
  Status Make() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/dtrain-spm-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return Status::IoError("sentencepiece: cannot make a temporary directory " + pattern + ": " +
                             std::strerror(errno));
    }
    path_ = pattern;
    return Status::OK();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last line of a tool's stderr that says what went wrong (SentencePiece ends a failure with a line saying only
// that the program terminated).
std::string LastLine(const std::string& text) {
  std::istringstream in(text);
  std::string line, last = "(no message)";
  while (std::getline(in, line)) {
    if (!line.empty() && line.rfind("Program terminated", 0) != 0) last = line;
  }
  return last;
}

// Runs `tool` (found on PATH) with `args`, stdin from `in` (or /dev/null), stdout to `out`, stderr to `err`.
// NotFound naming the package when the tool is not installed; InvalidArgument with `what` and the tool's last
// stderr line when it fails.
Status RunTool(const std::string& tool, const std::vector<std::string>& args, const std::string& in,
               const std::string& out, const std::string& err, const std::string& what) {
  std::vector<std::string> argv_s = {tool};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in.empty() ? "/dev/null" : in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, tool.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  const std::string missing = tool +
                              " is not installed: SentencePiece models need the tools of Debian's "
                              "`sentencepiece` package (apt-get install sentencepiece; scripts/install_deps.sh)";
  if (rc == ENOENT) return Status::NotFound(missing);
  if (rc != 0) return Status::IoError(tool + ": cannot start: " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::IoError(tool + ": waitpid: " + std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return Status::NotFound(missing);
  const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  return Status::InvalidArgument(what + ": " + tool + " failed (" + how + "): " + LastLine(ReadAll(err)));
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string model, int64_t vocab, proto::TokenizerInfo info)
      : model_(std::move(model)), vocab_(vocab), info_(std::move(info)) {}

  Status Encode(std::string_view text, std::vector<int32_t>* ids) override {
    ScratchDir dir;
    DT_RETURN_IF_ERROR(dir.Make());
    {
      std::ofstream f(dir.File("in.txt"), std::ios::binary);
      f.write(text.data(), static_cast<std::streamsize>(text.size()));
      f.close();
      if (!f) return Status::IoError("sentencepiece encode: cannot write " + dir.File("in.txt"));
    }
    DT_RETURN_IF_ERROR(RunTool("spm_encode", {"--model=" + model_, "--output_format=id", "--minloglevel=1"},
                               dir.File("in.txt"), dir.File("out.txt"), dir.File("err.txt"),
                               "sentencepiece encode with " + model_));
    std::ifstream out(dir.File("out.txt"));
    int64_t id = 0;
    while (out >> id) {
      if (id < 0 || id >= vocab_) {
        return Status::InvalidArgument("sentencepiece encode with " + model_ + ": spm_encode gave id " +
                                       std::to_string(id) + ", outside the model's " + std::to_string(vocab_));
      }
      ids->push_back(static_cast<int32_t>(id));
    }
    return Status::OK();
  }

  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_) {
        return Status::InvalidArgument("decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                       " is not in the vocabulary (" + std::to_string(vocab_) + " ids)");
      }
      line += (i ? " " : "") + std::to_string(ids[i]);
    }
    if (ids.empty()) return Status::OK();
    ScratchDir dir;
    DT_RETURN_IF_ERROR(dir.Make());
    {
      std::ofstream f(dir.File("in.txt"));
      f << line << "\n";
      f.close();
      if (!f) return Status::IoError("sentencepiece decode: cannot write " + dir.File("in.txt"));
    }
    DT_RETURN_IF_ERROR(RunTool("spm_decode", {"--model=" + model_, "--input_format=id", "--minloglevel=1"},
                               dir.File("in.txt"), dir.File("out.txt"), dir.File("err.txt"),
                               "sentencepiece decode with " + model_));
    std::string out = ReadAll(dir.File("out.txt"));
    if (!out.empty() && out.back() == '\n') out.pop_back();  // spm_decode ends each decoded line with one
    text->append(out);
    return Status::OK();
  }

  int64_t vocab_size() const override { return vocab_; }
  const proto::TokenizerInfo& info() const override { return info_; }

 private:
  std::string model_;
  int64_t vocab_;
  proto::TokenizerInfo info_;
};

}  // namespace

Status OpenSentencePiece(const std::string& path, proto::TokenizerInfo info, std::unique_ptr<Tokenizer>* out) {
  DT_RETURN_IF_ERROR(CheckRegularFile(path, "SentencePiece model"));
  ScratchDir dir;
  DT_RETURN_IF_ERROR(dir.Make());
  const Status st = RunTool("spm_export_vocab", {"--model=" + path, "--output_format=vocab", "--minloglevel=1"}, "",
                            dir.File("vocab.txt"), dir.File("err.txt"), "its vocabulary");
  if (st.code() == Status::Code::kInvalidArgument) {
    return Status::InvalidArgument(path + ": not a SentencePiece model (" + st.message() +
                                   "); --tokenizer takes a tokenizer.json, vocab.json + merges.txt, or a .model");
  }
  DT_RETURN_IF_ERROR(st);
  // One line per piece, in id order: "piece<TAB>score" (a piece never holds a tab or a newline).
  std::ifstream vocab(dir.File("vocab.txt"));
  std::string line;
  int64_t n = 0, eos = -1;
  while (std::getline(vocab, line)) {
    if (eos < 0 && line.substr(0, line.find('\t')) == "</s>") eos = n;
    ++n;
  }
  if (n == 0) return Status::InvalidArgument(path + ": not a SentencePiece model (spm_export_vocab gave no pieces)");
  info.set_kind("sentencepiece");
  info.set_eot_token(eos);
  *out = std::make_unique<SentencePieceTokenizer>(path, n, std::move(info));
  return Status::OK();
}

Status TrainSentencePiece(const SentencePieceTrainOptions& o) {
  DT_CHECK_ARG(!o.inputs.empty(), "train-tokenizer: no --input files");
  DT_CHECK_ARG(!o.out_prefix.empty(), "train-tokenizer: --out PREFIX is required");
  DT_CHECK_ARG(o.model_type == "bpe" || o.model_type == "unigram",
               "train-tokenizer: --model-type must be bpe or unigram, got '" << o.model_type << "'");
  DT_CHECK_ARG(o.vocab_size >= 260 && o.vocab_size <= (1 << 24),
               "train-tokenizer: --vocab-size must be in [260, 16777216] (256 byte pieces + <unk> <s> </s> + 1), got "
                   << o.vocab_size);
  std::string inputs;
  for (const std::string& f : o.inputs) {
    DT_RETURN_IF_ERROR(CheckRegularFile(f, "train-tokenizer input"));
    DT_CHECK_ARG(f.find(',') == std::string::npos,
                 "train-tokenizer: input '" << f << "' has a comma in its name, which SentencePiece cannot take");
    inputs += (inputs.empty() ? "" : ",") + f;
  }
  for (const char* ext : {".model", ".vocab"}) {
    std::error_code ec;
    if (std::filesystem::exists(o.out_prefix + ext, ec)) {
      return Status::InvalidArgument(o.out_prefix + ext +
                                     ": exists; train-tokenizer does not overwrite (give "
                                     "another --out PREFIX)");
    }
  }
  ScratchDir dir;
  DT_RETURN_IF_ERROR(dir.Make());
  const std::vector<std::string> args = {
      "--input=" + inputs,
      "--model_prefix=" + o.out_prefix,
      "--vocab_size=" + std::to_string(o.vocab_size),
      "--model_type=" + o.model_type,
      "--byte_fallback=true",
      "--split_digits=true",
      "--allow_whitespace_only_pieces=true",
      "--max_sentence_length=65536",
      "--num_threads=" + std::to_string(o.threads),
      "--minloglevel=1",
  };
  return RunTool("spm_train", args, "", dir.File("out.txt"), dir.File("err.txt"), "train-tokenizer (SentencePiece)");
}

}  // namespace dtrain::data
