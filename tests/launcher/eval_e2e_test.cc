// Evaluation through the real binary on the CPU (configs/llama_tiny.yaml on byte tokens, `dtrain data
// convert-text`): train.eval_every / eval_batches evaluate on a schedule without touching training (2 ranks under
// mpirun end with the weights of a run without evaluation, bit for bit), the eval loss is the loss of the same weights
// computed by the training step, perplexity is exp(loss), data.limit_train / limit_test set the epoch of a shards
// dataset (and a resumed limited run continues exactly, its eval schedule kept), metrics.csv holds metrics.jsonl's
// train and eval numbers, and the meaningless combinations are refused naming the key.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kConfig = std::string(DT_SOURCE_DIR) + "/configs/llama_tiny.yaml";

// Byte tokens of `sentences` sentences drawn by an LCG seeded `seed`, in records of 65 tokens, into <dir>/<name>.
void MakeText(const std::string& dir, const std::string& name, uint32_t seed, int sentences) {
  static const char* const kSentences[] = {"The quick brown fox jumps over the lazy dog. ",
                                           "Evaluation runs every few steps on the same batches. ",
                                           "Perplexity is the exponential of the mean token loss. ",
                                           "A limited epoch is the first samples of the split. ",
                                           "The checkpoint holds the loader position and the step. ",
                                           "Metrics go to JSON lines and to a CSV file beside them. "};
  std::string text;
  uint32_t state = seed;
  for (int i = 0; i < sentences; ++i) {
    state = state * 1664525u + 1013904223u;
    text += kSentences[(state >> 16) % 6];
  }
  WriteFile(dir + "/" + name + ".txt", text);
  const ProcessResult r = RunCommand(DtrainBin() + " data convert-text --out " + dir + "/" + name + " --seq-len 64 " +
                                     dir + "/" + name + ".txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// The text of `"key":<number>` in a metrics.jsonl line ("" when absent).
std::string JsonNumber(const std::string& line, const std::string& key) {
  const auto p = line.find("\"" + key + "\":");
  if (p == std::string::npos) return "";
  const auto b = p + key.size() + 3;
  return line.substr(b, line.find_first_of(",}", b) - b);
}

// The cells of one CSV row (RFC 4180 quoting).
std::vector<std::string> SplitCsv(const std::string& row) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < row.size(); ++i) {
    const char ch = row[i];
    if (quoted && ch == '"' && i + 1 < row.size() && row[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += ch;
    }
  }
  return cells;
}

// metrics.csv has one header and a row per train/eval record of metrics.jsonl, whose numbers are the jsonl text.
void ExpectCsvMatchesJsonl(const std::string& run) {
  const std::string jsonl = ReadFile(run + "/metrics.jsonl");
  std::vector<std::string> records;
  for (const std::string& l : Lines(jsonl, "\"kind\":")) {
    if (l.find("\"kind\":\"train\"") != std::string::npos || l.find("\"kind\":\"eval\"") != std::string::npos) {
      records.push_back(l);
    }
  }
  const std::vector<std::string> rows = Lines(ReadFile(run + "/metrics.csv"), "");
  ASSERT_EQ(rows.size(), records.size() + 1) << ReadFile(run + "/metrics.csv");
  const std::vector<std::string> header = SplitCsv(rows[0]);
  ASSERT_EQ(header[0], "kind");
  for (size_t i = 0; i < records.size(); ++i) {
    const std::vector<std::string> cells = SplitCsv(rows[i + 1]);
    ASSERT_EQ(cells.size(), header.size()) << rows[i + 1];
    EXPECT_NE(records[i].find("\"kind\":\"" + cells[0] + "\""), std::string::npos) << rows[i + 1];
    for (size_t c = 1; c + 1 < header.size(); ++c) {  // the numbers (kind first, verdict last)
      EXPECT_EQ(cells[c], JsonNumber(records[i], header[c])) << header[c] << " in " << rows[i + 1];
    }
    EXPECT_EQ(header.back(), "verdict");
  }
}

std::string Common(const std::string& d) {
  return kConfig + " --set data.dataset=shards --set data.train_shards=" + d + "/train --set data.test_shards=" + d +
         "/test --set run.tensorboard=false --set train.log_every=4 --set train.eval=true";
}

// 2 ranks under mpirun with grad accumulation: evaluation every 4 steps on 2 global batches leaves the training
// untouched (the same weights and losses as without evaluation), at steps 4, 8, 12, with perplexity exp(loss).
TEST(EvalE2E, PeriodicEvalOnTwoRanksLeavesTrainingUntouched) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeText(d, "train", 12345, 300));
  ASSERT_NO_FATAL_FAILURE(MakeText(d, "test", 777, 100));
  const std::string args = Common(d) +
                           " --set train.max_steps=12 --set data.batch_size=4 --set train.grad_accum_steps=2" +
                           " --set data.eval_batch_size=4 --set checkpoint.enabled=false";
  const std::string launch = DtrainBin() + " launch --oversubscribe --nproc-per-node 2 ";
  const ProcessResult plain = RunCommand(launch + args + " --set train.eval=false --set run.dir=" + d + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const ProcessResult ev = RunCommand(launch + args + " --set train.eval_every=4 --set train.eval_batches=2" +
                                      " --set run.dir=" + d + "/eval");
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/plain/final.safetensors", d + "/eval/final.safetensors"), 0.0);
  const auto tp = Lines(ReadFile(d + "/plain/metrics.jsonl"), "\"kind\":\"train\"");
  const auto te = Lines(ReadFile(d + "/eval/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(tp.size(), 3u);
  ASSERT_EQ(te.size(), 3u);
  for (size_t i = 0; i < tp.size(); ++i) EXPECT_EQ(JsonNumber(tp[i], "loss"), JsonNumber(te[i], "loss")) << te[i];
  const auto evals = Lines(ReadFile(d + "/eval/metrics.jsonl"), "\"kind\":\"eval\"");
  ASSERT_EQ(evals.size(), 3u);
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(Field(evals[i], "step"), 4.0 * (i + 1)) << evals[i];
    const double loss = Field(evals[i], "eval_loss");
    EXPECT_GT(loss, 0.5) << evals[i];
    EXPECT_NEAR(Field(evals[i], "eval_ppl"), std::exp(loss), 1e-7 * std::exp(loss)) << evals[i];
  }
  EXPECT_LT(Field(evals[2], "eval_loss"), Field(evals[0], "eval_loss"));  // it learns
  EXPECT_NE(ev.output.find("epoch 1/1 step 8/12 eval | loss "), std::string::npos) << ev.output;
  EXPECT_NE(ev.output.find(" | ppl "), std::string::npos) << ev.output;
  ExpectCsvMatchesJsonl(d + "/eval");
}

// With lr 0 the weights stay put, so the evaluation after step 1 scores the weights step 1 trained with; on the same
// 16 sequences (data.limit_train = limit_test = 16 of one dataset, one global batch) its loss is the step's training
// loss. data.limit_train also sets the epoch: 16 -> 1 step, 48 -> 3 steps.
TEST(EvalE2E, EvalLossIsTheTrainingLossOfTheSameWeightsAndLimitsSetTheEpoch) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeText(d, "train", 12345, 300));
  const std::string args = kConfig + " --set data.dataset=shards --set data.train_shards=" + d +
                           "/train --set data.test_shards=" + d +
                           "/train --set run.tensorboard=false --set train.eval=true" +
                           " --set checkpoint.enabled=false --set train.max_steps=0 --set train.epochs=1" +
                           " --set data.batch_size=16 --set data.eval_batch_size=8 --set train.log_every=1" +
                           " --set optim.lr=0 --set schedule.kind=constant --set schedule.warmup_steps=0";
  const ProcessResult one = RunCommand(DtrainBin() + " train " + args +
                                       " --set data.limit_train=16 --set data.limit_test=16 --set train.eval_every=1" +
                                       " --set run.dir=" + d + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string m = ReadFile(d + "/one/metrics.jsonl");
  EXPECT_EQ(Field(Lines(m, "\"kind\":\"start\"").at(0), "total_steps"), 1.0) << m;
  const auto train = Lines(m, "\"kind\":\"train\"");
  const auto evals = Lines(m, "\"kind\":\"eval\"");
  ASSERT_EQ(train.size(), 1u) << m;
  ASSERT_EQ(evals.size(), 1u) << m;
  const double loss = Field(train[0], "loss"), eval = Field(evals[0], "eval_loss");
  EXPECT_GT(loss, 4.0);  // an untrained byte model: about ln 256 = 5.5
  EXPECT_NEAR(eval, loss, 1e-5 * loss) << train[0] << "\n" << evals[0];
  EXPECT_NEAR(Field(evals[0], "eval_ppl"), std::exp(eval), 1e-7 * std::exp(eval));
  ExpectCsvMatchesJsonl(d + "/one");

  const ProcessResult three = RunCommand(DtrainBin() + " train " + args + " --set data.limit_train=48" +
                                         " --set train.eval=false --set run.dir=" + d + "/three");
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_NE(three.output.find("48 training samples (data.limit_train of "), std::string::npos) << three.output;
  const std::string m3 = ReadFile(d + "/three/metrics.jsonl");
  EXPECT_EQ(Field(Lines(m3, "\"kind\":\"start\"").at(0), "total_steps"), 3.0) << m3;
  EXPECT_EQ(Lines(m3, "\"kind\":\"train\"").size(), 3u) << m3;
}

// A limited run of 2 epochs (64 samples, 8 steps each) interrupted at step 9 resumes from its checkpoint of step 6
// and ends with the uninterrupted run's weights bit for bit; its evaluations stay at multiples of 4 with the same
// values; metrics.csv keeps one header across the attempts.
TEST(EvalE2E, LimitedRunResumesExactlyWithItsEvalSchedule) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeText(d, "train", 12345, 300));
  ASSERT_NO_FATAL_FAILURE(MakeText(d, "test", 777, 100));
  const std::string args = Common(d) + " --set train.max_steps=0 --set train.epochs=2 --set data.batch_size=8" +
                           " --set data.limit_train=64 --set data.limit_test=16 --set train.eval_every=4" +
                           " --set train.eval_batches=1 --set checkpoint.every_steps=6 --set checkpoint.async=false";
  const ProcessResult full = RunCommand(DtrainBin() + " train " + args + " --set run.dir=" + d + "/full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const ProcessResult part = RunCommand("DTRAIN_FAULT=step=9,action=error " + DtrainBin() + " train " + args +
                                        " --set run.dir=" + d + "/part");
  ASSERT_NE(part.exit_code, 0) << part.output;
  const ProcessResult resumed =
      RunCommand("DTRAIN_RESTART_COUNT=1 " + DtrainBin() + " train " + args + " --set run.dir=" + d + "/part");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step 6"), std::string::npos) << resumed.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/part/final.safetensors"), 0.0);
  const std::string mf = ReadFile(d + "/full/metrics.jsonl");
  EXPECT_EQ(Field(Lines(mf, "\"kind\":\"start\"").at(0), "total_steps"), 16.0) << mf;
  const auto ef = Lines(mf, "\"kind\":\"eval\"");
  const auto ep = Lines(ReadFile(d + "/part/metrics.jsonl"), "\"kind\":\"eval\"");
  ASSERT_EQ(ef.size(), 4u) << mf;  // steps 4, 8, 12, 16
  ASSERT_EQ(ep.size(), 5u);        // 4, 8 (attempt 0), then 8, 12, 16 (from step 6)
  const std::vector<size_t> same = {0, 1, 1, 2, 3};
  for (size_t i = 0; i < ep.size(); ++i) {
    EXPECT_EQ(JsonNumber(ep[i], "step"), JsonNumber(ef[same[i]], "step")) << ep[i];
    EXPECT_EQ(JsonNumber(ep[i], "eval_loss"), JsonNumber(ef[same[i]], "eval_loss")) << ep[i];
  }
  EXPECT_EQ(Lines(ReadFile(d + "/part/metrics.csv"), "kind,epoch,step").size(), 1u);
  ExpectCsvMatchesJsonl(d + "/part");
}

// Meaningless combinations are refused before training, exit 2, naming the key.
TEST(EvalE2E, MeaninglessEvalAndLimitSettingsAreRefused) {
  TempDir tmp;
  const std::string run = " --set run.dir=" + tmp.path() + "/run";
  struct Case {
    std::string set, must_name;
  };
  for (const Case& c : {Case{"--set data.limit_train=100", "data.limit_train 100"},
                        Case{"--set data.limit_test=10", "data.limit_test 10"},
                        Case{"--set train.eval_every=5 --set train.eval=true",
                             "train.eval_every 5: data.dataset synthetic_tokens has no evaluation data"},
                        Case{"--set train.eval_every=5 --set train.eval=false", "needs train.eval true"}}) {
    SCOPED_TRACE(c.set);
    const ProcessResult r = RunCommand(DtrainBin() + " train " + kConfig + run + " " + c.set);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.must_name), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
