#include "runtime/config/yaml.h"

#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace dtrain::runtime {
namespace {

using Kind = YamlNode::Kind;

YamlNode Parse(const std::string& text) {
  YamlNode root;
  const Status st = ParseYaml(text, "t.yaml", &root);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return root;
}

std::vector<std::string> Scalars(const YamlNode& seq) {
  std::vector<std::string> out;
  for (const YamlNode& item : seq.items) out.push_back(item.scalar);
  return out;
}

TEST(YamlTest, NestedMappingsKeepOrderAndPositions) {
  const YamlNode root = Parse(
      "model:\n"
      "  kind: mlp\n"
      "  mlp:\n"
      "    input_dim: 784\n"
      "\n"
      "    activation: relu\n"
      "run:\n"
      "  dir: runs/x\n");
  ASSERT_EQ(root.kind, Kind::kMap);
  ASSERT_EQ(root.entries.size(), 2u);
  EXPECT_EQ(root.entries[0].key, "model");
  EXPECT_EQ(root.entries[1].key, "run");
  EXPECT_EQ(root.entries[1].line, 7);
  const YamlNode* model = root.Find("model");
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->kind, Kind::kMap);
  const YamlNode* mlp = model->Find("mlp");
  ASSERT_NE(mlp, nullptr);
  ASSERT_EQ(mlp->entries.size(), 2u);
  EXPECT_EQ(mlp->entries[0].key, "input_dim");
  EXPECT_EQ(mlp->entries[0].value.scalar, "784");
  EXPECT_EQ(mlp->entries[0].value.line, 4);
  EXPECT_EQ(mlp->entries[0].value.col, 16);
  EXPECT_EQ(mlp->entries[1].value.scalar, "relu");
  EXPECT_EQ(mlp->entries[1].line, 6);
  EXPECT_EQ(mlp->entries[1].col, 5);
  EXPECT_EQ(root.Find("run")->Find("dir")->scalar, "runs/x");
  EXPECT_EQ(root.Find("missing"), nullptr);
}

TEST(YamlTest, BlockAndFlowSequences) {
  const YamlNode root = Parse(
      "a:\n"
      "  - 1\n"
      "  - two\n"
      "b:\n"
      "- x\n"
      "- 'y z'\n"
      "c: [1, 2.5, \"three\", [4, 5], ]\n"
      "d: []\n");
  const YamlNode* a = root.Find("a");
  ASSERT_EQ(a->kind, Kind::kSeq);
  EXPECT_EQ(Scalars(*a), (std::vector<std::string>{"1", "two"}));
  EXPECT_EQ(a->items[1].line, 3);
  const YamlNode* b = root.Find("b");
  ASSERT_EQ(b->kind, Kind::kSeq);
  EXPECT_EQ(Scalars(*b), (std::vector<std::string>{"x", "y z"}));
  EXPECT_TRUE(b->items[1].quoted);
  const YamlNode* c = root.Find("c");
  ASSERT_EQ(c->kind, Kind::kSeq);
  ASSERT_EQ(c->items.size(), 4u);
  EXPECT_EQ(c->items[1].scalar, "2.5");
  EXPECT_TRUE(c->items[2].quoted);
  ASSERT_EQ(c->items[3].kind, Kind::kSeq);
  EXPECT_EQ(Scalars(c->items[3]), (std::vector<std::string>{"4", "5"}));
  EXPECT_EQ(root.Find("d")->kind, Kind::kSeq);
  EXPECT_TRUE(root.Find("d")->items.empty());
}

TEST(YamlTest, CommentsOutsideQuotesOnly) {
  const YamlNode root = Parse(
      "# leading comment\n"
      "a: 1 # trailing\n"
      "   # indented comment-only line\n"
      "b: 'x # not a comment'\n"
      "c: \"y # nor this\"  # but this is\n"
      "d: e#f\n"
      "g: [1, 2]  # after a flow sequence\n"
      "h:   # a null value\n");
  EXPECT_EQ(root.Find("a")->scalar, "1");
  EXPECT_EQ(root.Find("b")->scalar, "x # not a comment");
  EXPECT_EQ(root.Find("c")->scalar, "y # nor this");
  EXPECT_EQ(root.Find("d")->scalar, "e#f");
  EXPECT_EQ(root.Find("g")->items.size(), 2u);
  EXPECT_TRUE(root.Find("h")->IsNull());
}

TEST(YamlTest, QuotedScalarsAndEscapes) {
  const YamlNode root = Parse(
      "a: 'it''s'\n"
      "b: \"tab\\tnew\\nline \\\"q\\\" back\\\\ \\x41\\/\"\n"
      "c: ''\n"
      "'quoted key': 1\n"
      "e: plain text with spaces   \n"
      "f: http://example.com:80/x\n");
  EXPECT_EQ(root.Find("a")->scalar, "it's");
  EXPECT_EQ(root.Find("b")->scalar, "tab\tnew\nline \"q\" back\\ A/");
  EXPECT_TRUE(root.Find("c")->quoted);
  EXPECT_FALSE(root.Find("c")->IsNull());
  EXPECT_EQ(root.Find("quoted key")->scalar, "1");
  EXPECT_EQ(root.Find("e")->scalar, "plain text with spaces");
  EXPECT_FALSE(root.Find("e")->quoted);
  EXPECT_EQ(root.Find("f")->scalar, "http://example.com:80/x");
}

TEST(YamlTest, DocumentStartCrlfBomAndEmptyDocuments) {
  const YamlNode root = Parse("\xEF\xBB\xBF# c\r\n---\r\na: 1\r\n\r\nb: [x]\r\n");
  EXPECT_EQ(root.Find("a")->scalar, "1");
  EXPECT_EQ(root.Find("b")->items[0].scalar, "x");
  for (const char* empty : {"", "\n\n", "# only a comment\n", "---\n"}) {
    const YamlNode e = Parse(empty);
    EXPECT_EQ(e.kind, Kind::kMap) << empty;
    EXPECT_TRUE(e.entries.empty()) << empty;
  }
  const YamlNode seq = Parse("- 1\n- 2\n");
  EXPECT_EQ(seq.kind, Kind::kSeq);
  EXPECT_EQ(Scalars(seq), (std::vector<std::string>{"1", "2"}));
}

struct ErrorCase {
  const char* name;
  const char* text;
  const char* where;  // "t.yaml:<line>:<col>:"
  const char* what;   // a substring of the message
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class YamlErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(YamlErrorTest, NamesLineColumnAndExpectation) {
  const ErrorCase& c = GetParam();
  YamlNode root;
  const Status st = ParseYaml(c.text, "t.yaml", &root);
  ASSERT_FALSE(st.ok()) << c.name;
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind(c.where, 0), 0u) << st.message();
  EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(
    Subset, YamlErrorTest,
    ::testing::Values(
        ErrorCase{"tab_indent", "a:\n\tb: 1\n", "t.yaml:2:1:", "tab in indentation"},
        ErrorCase{"anchor", "a: &x 1\n", "t.yaml:1:4:", "anchors are not supported"},
        ErrorCase{"alias", "a: 1\nb: *x\n", "t.yaml:2:4:", "aliases are not supported"},
        ErrorCase{"tag", "a: !!int 1\n", "t.yaml:1:4:", "tags are not supported"},
        ErrorCase{"block_scalar", "a: |\n  text\n", "t.yaml:1:4:", "block scalars are not supported"},
        ErrorCase{"flow_map", "a:\n  b: {c: 1}\n", "t.yaml:2:6:", "flow mappings are not supported"},
        ErrorCase{"complex_key", "? a\n", "t.yaml:1:1:", "complex keys are not supported"},
        ErrorCase{"duplicate_key", "a: 1\nb: 2\na: 3\n", "t.yaml:3:1:", "duplicate key 'a'"},
        ErrorCase{"multiline_plain", "a: one\n  two\n", "t.yaml:2:3:", "unexpected indentation"},
        ErrorCase{"unterminated_single", "a: 'abc\n", "t.yaml:1:4:", "unterminated quoted scalar"},
        ErrorCase{"unterminated_double", "a:\n  b: \"abc\n", "t.yaml:2:6:", "multi-line scalars are not supported"},
        ErrorCase{"unterminated_flow", "a: [1, 2\n", "t.yaml:1:4:", "expected ']' on the same line"},
        ErrorCase{"flow_missing_comma", "a: ['x' 2]\n", "t.yaml:1:9:", "expected ',' or ']'"},
        ErrorCase{"flow_empty_item", "a: [1, , 2]\n", "t.yaml:1:8:", "expected a scalar"},
        ErrorCase{"bad_dedent", "a:\n    b: 1\n  c: 2\n", "t.yaml:3:3:", "unexpected indentation"},
        ErrorCase{"top_level_dedent", "  a: 1\nb: 2\n", "t.yaml:2:1:", "inconsistent indentation"},
        ErrorCase{"second_document", "a: 1\n---\nb: 2\n", "t.yaml:2:1:", "second document"},
        ErrorCase{"map_in_sequence", "a:\n  - b: 1\n", "t.yaml:2:6:", "mappings inside sequences"},
        ErrorCase{"nested_block_in_sequence", "a:\n  -\n    - 1\n", "t.yaml:2:3:", "after '-'"},
        ErrorCase{"inline_nested_map", "a: b: c\n", "t.yaml:1:5:", "unexpected ': '"},
        ErrorCase{"inline_block_seq", "a: - 1\n", "t.yaml:1:4:", "block sequence must start on its own line"},
        ErrorCase{"missing_colon", "a: 1\njust text\n", "t.yaml:2:1:", "expected 'key: value' or '- item'"},
        ErrorCase{"no_space_after_colon", "'a':1\n", "t.yaml:1:5:", "expected a space after ':'"},
        ErrorCase{"seq_then_key", "a:\n  - 1\n  b: 2\n", "t.yaml:3:3:", "unexpected indentation"},
        ErrorCase{"key_after_top_seq", "- 1\nb: 2\n", "t.yaml:2:1:", "top level is a sequence"},
        ErrorCase{"bad_escape", "a: \"\\q\"\n", "t.yaml:1:5:", "unsupported escape '\\q'"},
        ErrorCase{"bad_hex_escape", "a: \"\\x4\"\n", "t.yaml:1:5:", "two hex digits"},
        ErrorCase{"junk_after_quote", "a: 'x' y\n", "t.yaml:1:8:", "expected the end of the line"},
        ErrorCase{"control_char", "a: 1\nb: x\x01y\n", "t.yaml:2:5:", "control character 0x01"},
        ErrorCase{"junk_after_doc_start", "--- a\n", "t.yaml:1:5:", "after '---'"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

TEST(YamlTest, NestingDepthIsBounded) {
  // Block nesting: kYamlMaxDepth levels parse, one more fails.
  auto nested = [](int levels) {
    std::string text;
    for (int i = 0; i < levels; ++i) text += std::string(2 * i, ' ') + "k:\n";
    return text + std::string(2 * levels, ' ') + "leaf: 1\n";
  };
  YamlNode root;
  EXPECT_TRUE(ParseYaml(nested(kYamlMaxDepth - 1), "t.yaml", &root).ok());
  const Status deep = ParseYaml(nested(kYamlMaxDepth), "t.yaml", &root);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.message().find("nesting deeper than 32 levels"), std::string::npos) << deep.message();

  // Flow nesting far beyond the limit fails fast instead of overflowing the stack.
  const std::string flow = "a: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  const Status st = ParseYaml(flow, "t.yaml", &root);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("t.yaml:1:", 0), 0u) << st.message();
}

TEST(YamlTest, InputSizeIsBounded) {
  std::string big(kYamlMaxInputBytes + 1, '#');
  YamlNode root;
  const Status st = ParseYaml(big, "t.yaml", &root);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at most 1048576"), std::string::npos) << st.message();
}

TEST(YamlTest, ManyKeysParseInLinearTime) {
  std::string text;
  for (int i = 0; i < 50000; ++i) text += "key" + std::to_string(i) + ": " + std::to_string(i) + "\n";
  const YamlNode root = Parse(text);
  ASSERT_EQ(root.entries.size(), 50000u);
  EXPECT_EQ(root.entries[49999].value.scalar, "49999");
}

// Mutation fuzzing from a seed document: every input must give OK or an error that names the
// source, never a crash or a hang.
TEST(YamlTest, MutatedInputsNeverCrash) {
  const std::string seed =
      "---\n# c\nmodel:\n  kind: mlp\n  mlp:\n    hidden: [256, 128]\n    'q': \"a\\tb\"\n"
      "data:\n  - 1\n  - 'x'\n";
  const std::string alphabet = " \t\n\r-:#[],'\"\\&*!|>{}?x0.";
  std::mt19937 rng(1234);
  int ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const std::size_t pos = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          text.insert(pos, 1, c);
          break;
        case 1:
          if (pos < text.size()) text.erase(pos, 1);
          break;
        default:
          if (pos < text.size()) text[pos] = c;
          break;
      }
    }
    YamlNode root;
    const Status st = ParseYaml(text, "fuzz.yaml", &root);
    if (st.ok()) {
      ++ok;
    } else {
      ASSERT_EQ(st.message().rfind("fuzz.yaml:", 0), 0u) << st.message();
    }
  }
  EXPECT_GT(ok, 0);  // the mutations are small enough that some inputs stay valid
}

TEST(YamlTest, ParseValue) {
  YamlNode v;
  ASSERT_TRUE(ParseYamlValue("0.01", "--set optim.lr=0.01", &v).ok());
  EXPECT_EQ(v.kind, Kind::kScalar);
  EXPECT_EQ(v.scalar, "0.01");
  ASSERT_TRUE(ParseYamlValue(" [1, 'a b'] # c", "s", &v).ok());
  EXPECT_EQ(Scalars(v), (std::vector<std::string>{"1", "a b"}));
  ASSERT_TRUE(ParseYamlValue("", "s", &v).ok());
  EXPECT_TRUE(v.IsNull());
  ASSERT_TRUE(ParseYamlValue("'it''s'", "s", &v).ok());
  EXPECT_EQ(v.scalar, "it's");
  EXPECT_TRUE(v.quoted);

  const Status st = ParseYamlValue("[1, 2", "--set a=[1, 2", &v);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--set a=[1, 2: col 1: unterminated flow sequence: expected ']' on the same line");
  EXPECT_FALSE(ParseYamlValue("a: b", "s", &v).ok());
  EXPECT_FALSE(ParseYamlValue("x\ny", "s", &v).ok());
}

}  // namespace
}  // namespace dtrain::runtime
