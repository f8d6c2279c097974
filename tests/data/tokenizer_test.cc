// The tokenizers (data/tokenizer.h, data/gpt2_bpe.h, data/sentencepiece_tokenizer.h) on real files written here:
// GPT-2's pre-tokenizer and merges on known strings, byte-level round trips of arbitrary bytes, bad tokenizer
// files, SentencePiece training, and convert-text with a tokenizer and a validation split.
// (Token-for-token equality with GPT-2's real vocabulary: tests/tools/gpt2_bpe_check.py, ctest
// data_gpt2_bpe_reference.)
#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "data/convert.h"
#include "data/dataset.h"
#include "data/gpt2_bpe.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/unicode_classes.h"
#include "tests/testing/fixtures.h"

namespace dtrain::data {
namespace {

using testing::TempDir;

std::string Utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string ByteText(uint8_t b) { return Utf8(Gpt2ByteToCodePoint(b)); }

void Write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A GPT-2-style vocabulary: the 256 byte tokens (ids 0..255 in byte order), then the merges' results, then
// <|endoftext|>. Merges: "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d".
nlohmann::json TinyVocab(std::vector<std::string>* merges) {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[ByteText(static_cast<uint8_t>(b))] = b;
  *merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "l d"};
  int id = 256;
  for (const std::string& m : *merges) v[m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1)] = id++;
  v["<|endoftext|>"] = id;
  return v;
}

std::string WriteVocabMerges(const TempDir& dir) {
  std::vector<std::string> merges;
  Write(dir.File("vocab.json"), TinyVocab(&merges).dump());
  std::string m = "#version: 0.2\n";
  for (const auto& x : merges) m += x + "\n";
  Write(dir.File("merges.txt"), m);
  return dir.File("vocab.json");
}

std::vector<std::string> Pieces(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : Gpt2PreTokenize(text)) out.push_back(text.substr(b, e - b));
  return out;
}

// The Hugging Face layout of each kind's files: names in order and the class AutoTokenizer builds; a kind with no
// files (bytes) is NotFound, a file count the kind never records is DataLoss.
TEST(HfTokenizerLayoutTest, EachKindAndFileCountHasItsNamesAndClass) {
  auto layout = [](const std::string& kind, int files, HfTokenizerLayout* out) {
    proto::TokenizerInfo info;
    info.set_kind(kind);
    for (int i = 0; i < files; ++i) info.add_files("f" + std::to_string(i));
    return HfTokenizerLayoutOf(info, out);
  };
  HfTokenizerLayout l;
  ASSERT_TRUE(layout("sentencepiece", 1, &l).ok());
  EXPECT_EQ(l.names, std::vector<std::string>{"tokenizer.model"});
  EXPECT_EQ(nlohmann::json::parse(l.config_json)["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(l.config_json.back(), '\n');
  ASSERT_TRUE(layout("gpt2_bpe", 1, &l).ok());
  EXPECT_EQ(l.names, std::vector<std::string>{"tokenizer.json"});
  EXPECT_EQ(nlohmann::json::parse(l.config_json)["tokenizer_class"], "PreTrainedTokenizerFast");
  ASSERT_TRUE(layout("gpt2_bpe", 2, &l).ok());
  EXPECT_EQ(l.names, (std::vector<std::string>{"vocab.json", "merges.txt"}));
  EXPECT_EQ(nlohmann::json::parse(l.config_json)["tokenizer_class"], "GPT2TokenizerFast");
  EXPECT_EQ(layout("bytes", 0, &l).code(), Status::Code::kNotFound);
  EXPECT_EQ(layout("gpt2_bpe", 0, &l).code(), Status::Code::kNotFound);
  EXPECT_EQ(layout("gpt2_bpe", 3, &l).code(), Status::Code::kDataLoss);
  EXPECT_EQ(layout("sentencepiece", 2, &l).code(), Status::Code::kDataLoss);
}

TEST(UnicodeClassesTest, LettersNumbersSpaces) {
  EXPECT_EQ(ClassifyCodePoint('a'), CodePointClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(U'é'), CodePointClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(0x4E2D), CodePointClass::kLetter);  // 中 (Lo)
  EXPECT_EQ(ClassifyCodePoint('7'), CodePointClass::kNumber);
  EXPECT_EQ(ClassifyCodePoint(0x00BD), CodePointClass::kNumber);  // ½ (No)
  EXPECT_EQ(ClassifyCodePoint(0x2167), CodePointClass::kNumber);  // Ⅷ (Nl)
  EXPECT_EQ(ClassifyCodePoint('\n'), CodePointClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint(0x3000), CodePointClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint('!'), CodePointClass::kOther);
  EXPECT_EQ(ClassifyCodePoint(0x1F600), CodePointClass::kOther);  // 😀 (So)
  EXPECT_EQ(ClassifyCodePoint(0x110000), CodePointClass::kOther);
}

TEST(Gpt2BpeTest, ByteToUnicodeIsGpt2s) {
  EXPECT_EQ(Gpt2ByteToCodePoint('A'), U'A');
  EXPECT_EQ(Gpt2ByteToCodePoint(' '), 0x120u);   // Ġ
  EXPECT_EQ(Gpt2ByteToCodePoint('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(Gpt2ByteToCodePoint(0), 0x100u);
  EXPECT_EQ(Gpt2ByteToCodePoint(0xAD), 0x143u);  // the soft hyphen, the last non-printable byte
}

TEST(Gpt2BpeTest, PreTokenizerFollowsGpt2sRegex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces("it's they'll I'M"), (V{"it", "'s", " they", "'ll", " I", "'", "M"}));
  EXPECT_EQ(Pieces("x  y"), (V{"x", " ", " y"}));  // \s+(?!\S) leaves the last space to " y"
  EXPECT_EQ(Pieces("a\n\n b"), (V{"a", "\n\n", " b"}));
  EXPECT_EQ(Pieces("a\nb"), (V{"a", "\n", "b"}));      // one space before a non-space: \s+
  EXPECT_EQ(Pieces("end.  "), (V{"end", ".", "  "}));  // trailing white space runs to the end
  EXPECT_EQ(Pieces("abc123 456!?"), (V{"abc", "123", " 456", "!?"}));
  EXPECT_EQ(Pieces(" !!x"), (V{" !!", "x"}));
  EXPECT_EQ(Pieces("caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87"), (V{"caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(Pieces("a\xFF\xFE"
                   "b"),
            (V{"a", "\xFF\xFE", "b"}));  // invalid UTF-8: bytes of no class
}

TEST(Gpt2BpeTest, MergesByRankOnKnownStrings) {
  TempDir dir;
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(OpenTokenizer(WriteVocabMerges(dir), &t).ok());
  EXPECT_EQ(t->info().kind(), "gpt2_bpe");
  EXPECT_EQ(t->vocab_size(), 256 + 8 + 1);
  EXPECT_EQ(t->info().eot_token(), 264);
  EXPECT_EQ(t->info().files_size(), 2);
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode("hello world", &ids).ok());
  // "hello" -> he, ll -> hell -> hello (259); " world" -> Ġw, or -> Ġwor (262), l d -> ld (263)
  EXPECT_EQ(ids, (std::vector<int32_t>{259, 262, 263}));
  ids.clear();
  ASSERT_TRUE(t->Encode("hellll", &ids).ok());  // he ll ll: "he ll" (rank 2) merges once, left to right
  EXPECT_EQ(ids, (std::vector<int32_t>{258, 257}));
  ids.clear();
  ASSERT_TRUE(t->Encode("<|endoftext|>", &ids).ok());  // literal text, not the special token
  EXPECT_EQ(ids.size(), 13u);                          // "<|", "endoftext", "|>": 13 byte tokens
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 264), 0);
}

TEST(Gpt2BpeTest, TokenizerJsonGivesTheSameIds) {
  TempDir dir;
  std::vector<std::string> merges;
  nlohmann::json vocab = TinyVocab(&merges);
  vocab.erase("<|endoftext|>");
  nlohmann::json j = {{"version", "1.0"},
                      {"added_tokens", {{{"id", 264}, {"content", "<|endoftext|>"}, {"special", true}}}},
                      {"normalizer", nullptr},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                      {"decoder", {{"type", "ByteLevel"}}},
                      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  Write(dir.File("tokenizer.json"), j.dump());
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(OpenTokenizer(dir.path(), &t).ok());  // a directory holding tokenizer.json
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode("hello world", &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{259, 262, 263}));
  EXPECT_EQ(t->info().eot_token(), 264);
  std::string text;
  ASSERT_TRUE(t->Decode({259, 264}, &text).ok());
  EXPECT_EQ(text, "hello<|endoftext|>");
}

TEST(Gpt2BpeTest, ArbitraryBytesRoundTrip) {
  TempDir dir;
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(OpenTokenizer(WriteVocabMerges(dir), &t).ok());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(trial % 2 ? rng() % 256 : " \n\thelowrd'sé\xC3\xFF"[rng() % 14]);
    std::vector<int32_t> ids;
    ASSERT_TRUE(t->Encode(s, &ids).ok());
    std::string back;
    ASSERT_TRUE(t->Decode(ids, &back).ok());
    ASSERT_EQ(back, s) << "trial " << trial;
  }
  std::string back;
  const Status st = t->Decode({5, 9999}, &back);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("id 9999 at position 1"), std::string::npos) << st.ToString();
}

TEST(TokenizerFilesTest, BadFilesNameTheFileAndTheFault) {
  TempDir dir;
  auto err = [](const std::string& path) {
    std::unique_ptr<Tokenizer> t;
    const Status st = OpenTokenizer(path, &t);
    EXPECT_FALSE(st.ok()) << path;
    return st.ToString();
  };
  EXPECT_NE(err(dir.File("nope.json")).find("nope.json"), std::string::npos);
  EXPECT_NE(err(dir.path()).find("no tokenizer in it"), std::string::npos);
  Write(dir.File("broken.json"), "{\"model\": ");
  EXPECT_NE(err(dir.File("broken.json")).find("broken.json: is not valid JSON"), std::string::npos);
  Write(dir.File("wp.json"), R"({"model": {"type": "WordPiece", "vocab": {}}})");
  EXPECT_NE(err(dir.File("wp.json")).find("wp.json: model.type is 'WordPiece'"), std::string::npos);
  Write(dir.File("meta.json"), R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                   "pre_tokenizer": {"type": "Metaspace"}})");
  EXPECT_NE(err(dir.File("meta.json")).find("pre_tokenizer must be"), std::string::npos);
  // vocab.json without merges beside it; then merges with a bad line; then a merge of unknown pieces
  TempDir d2;
  std::vector<std::string> merges;
  Write(d2.File("vocab.json"), TinyVocab(&merges).dump());
  EXPECT_NE(err(d2.File("vocab.json")).find("merges.txt (or vocab.bpe) not found"), std::string::npos);
  Write(d2.File("merges.txt"), "#version: 0.2\nh e\nbad_line\n");
  EXPECT_NE(err(d2.File("vocab.json")).find("merges.txt:3: expected a merge 'LEFT RIGHT', got 'bad_line'"),
            std::string::npos);
  Write(d2.File("merges.txt"), "h e\nzz q\n");
  EXPECT_NE(err(d2.File("vocab.json")).find("merge 2 ('zz q'): 'zz' is not in the vocabulary"), std::string::npos);
  Write(d2.File("small.json"), R"({"a": 0, "b": 1})");
  Write(d2.File("merges.txt"), "a b\n");
  EXPECT_NE(err(d2.File("small.json")).find("no vocabulary token for byte 0"), std::string::npos);
  Write(dir.File("junk.model"), "not a model");
  EXPECT_NE(err(dir.File("junk.model")).find("junk.model: not a SentencePiece model"), std::string::npos);
}

// A small English corpus: sentences from a fixed word list, one per line.
std::string Corpus(int lines) {
  const char* words[] = {"the", "model", "reads", "tokens", "from", "shards", "and",   "every",     "rank", "trains",
                         "on",  "its",   "own",   "slice",  "of",   "data",   "while", "gradients", "are",  "averaged"};
  std::mt19937 rng(3);
  std::string text;
  for (int l = 0; l < lines; ++l) {
    const int n = 5 + static_cast<int>(rng() % 10);
    for (int w = 0; w < n; ++w) text += std::string(w ? " " : "") + words[rng() % 20];
    text += ".\n";
  }
  return text;
}

// A 320-piece model trained on Corpus(2000) written into `dir` (dir/tok.model once trained).
SentencePieceTrainOptions SmallModel(const TempDir& dir) {
  Write(dir.File("corpus.txt"), Corpus(2000));
  SentencePieceTrainOptions o;
  o.inputs = {dir.File("corpus.txt")};
  o.out_prefix = dir.File("tok");
  o.vocab_size = 320;
  return o;
}

TEST(SentencePieceTest, TrainEncodeDecode) {
  TempDir dir;
  SentencePieceTrainOptions o = SmallModel(dir);
  ASSERT_TRUE(TrainSentencePiece(o).ok());
  const Status again = TrainSentencePiece(o);  // never overwrites
  EXPECT_NE(again.message().find("tok.model: exists"), std::string::npos) << again.ToString();
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(OpenTokenizer(dir.File("tok.model"), &t).ok());
  EXPECT_EQ(t->info().kind(), "sentencepiece");
  EXPECT_EQ(t->vocab_size(), 320);
  EXPECT_EQ(t->info().eot_token(), 2);  // </s>
  const std::string text = "every rank trains on its own slice of data.";
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode(text, &ids).ok());
  // Words of the corpus became pieces (320 pieces leave 61 merges: 23 ids for these 43 characters here).
  EXPECT_LT(ids.size(), text.size() * 2 / 3);
  std::string back;
  ASSERT_TRUE(t->Decode(ids, &back).ok());
  EXPECT_EQ(back, text);
  ids.clear();  // unseen characters go through the byte pieces, not <unk>
  ASSERT_TRUE(t->Encode("Zürich \xE4\xB8\xAD", &ids).ok());
  back.clear();
  ASSERT_TRUE(t->Decode(ids, &back).ok());
  EXPECT_EQ(back, "Zürich \xE4\xB8\xAD");
  o.out_prefix = dir.File("big");
  o.vocab_size = 100000;
  const Status big = TrainSentencePiece(o);
  EXPECT_FALSE(big.ok());
  EXPECT_NE(big.message().find("train-tokenizer (SentencePiece)"), std::string::npos) << big.ToString();
}

// Without the `sentencepiece` package's tools on PATH, training and opening a model are refused naming the tool
// and the package (NotFound: exit 2 on the command line), never a crash.
TEST(SentencePieceTest, MissingToolsNamed) {
  TempDir dir;
  Write(dir.File("corpus.txt"), Corpus(200));
  Write(dir.File("any.model"), "x");
  const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  setenv("PATH", dir.path().c_str(), 1);  // a directory holding no spm_* tool
  SentencePieceTrainOptions o;
  o.inputs = {dir.File("corpus.txt")};
  o.out_prefix = dir.File("tok");
  o.vocab_size = 300;
  const Status train = TrainSentencePiece(o);
  std::unique_ptr<Tokenizer> t;
  const Status open = OpenTokenizer(dir.File("any.model"), &t);
  setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(train.code(), Status::Code::kNotFound) << train.ToString();
  EXPECT_NE(train.message().find("spm_train is not installed"), std::string::npos) << train.ToString();
  EXPECT_NE(train.message().find("apt-get install sentencepiece"), std::string::npos) << train.ToString();
  EXPECT_EQ(open.code(), Status::Code::kNotFound) << open.ToString();
  EXPECT_NE(open.message().find("spm_export_vocab is not installed"), std::string::npos) << open.ToString();
}

TEST(ConvertTextTest, TokenizerAndValidationSplit) {
  TempDir dir;
  const SentencePieceTrainOptions o = SmallModel(dir);
  ASSERT_TRUE(TrainSentencePiece(o).ok());
  TextConvertOptions c;
  c.tokenizer = dir.File("tok.model");
  c.seq_len = 32;
  c.val_fraction = 0.1;
  TextConvertResult r;
  ASSERT_TRUE(ConvertText({dir.File("corpus.txt")}, dir.File("ds"), c, &r).ok());
  EXPECT_EQ(r.schema.vocab_size(), 320);
  EXPECT_EQ(r.schema.token_dtype(), proto::DatasetSchema::UINT16);
  const auto n_val = static_cast<int64_t>(static_cast<double>(r.tokens) * 0.1);
  EXPECT_EQ(r.train_records, (r.tokens - n_val - 1) / 32);
  EXPECT_EQ(r.val_records, (n_val - 1) / 32);
  for (const char* split : {"train", "val"}) {
    std::unique_ptr<Dataset> ds;
    ASSERT_TRUE(Dataset::Open(dir.File(std::string("ds/") + split), true, &ds).ok()) << split;
    const proto::DatasetSchema& s = ds->manifest().schema();
    EXPECT_EQ(s.dims(0), 33);
    EXPECT_EQ(s.vocab_size(), 320);
    EXPECT_EQ(s.tokenizer().kind(), "sentencepiece");
    ASSERT_EQ(s.tokenizer().files_size(), 1);
    EXPECT_EQ(s.tokenizer().files(0), dir.File("tok.model"));
    EXPECT_NE(s.tokenizer().crc32c(), 0u);
    EXPECT_EQ(s.tokenizer().eot_token(), 2);
    EXPECT_EQ(static_cast<int64_t>(ds->size()), std::string(split) == "train" ? r.train_records : r.val_records);
    std::vector<std::string> report;
    EXPECT_TRUE(ds->Verify(&report, /*check_tokens=*/true).ok());
  }
  // The existing output is refused; a validation split shorter than a record is refused naming it.
  EXPECT_NE(ConvertText({dir.File("corpus.txt")}, dir.File("ds"), c).message().find("is not empty"), std::string::npos);
  c.val_fraction = 0.0001;
  const Status tiny = ConvertText({dir.File("corpus.txt")}, dir.File("ds2"), c);
  EXPECT_NE(tiny.message().find("validation tokens"), std::string::npos) << tiny.ToString();
  c.val_fraction = 0;  // no split, byte tokens: the dataset is OUT itself
  c.tokenizer.clear();
  ASSERT_TRUE(ConvertText({dir.File("corpus.txt")}, dir.File("bytes"), c, &r).ok());
  EXPECT_EQ(r.schema.vocab_size(), 256);
  EXPECT_EQ(r.schema.tokenizer().kind(), "bytes");
  EXPECT_EQ(r.schema.tokenizer().eot_token(), -1);
  EXPECT_EQ(r.tokens, static_cast<int64_t>(Corpus(2000).size()));
}

}  // namespace
}  // namespace dtrain::data
