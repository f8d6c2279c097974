#include "tests/testing/llama_text.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {

void MakeLlamaTextData(const std::string& dir) {
  static const char* const kSentences[] = {"The quick brown fox jumps over the lazy dog. ",
                                           "A model is one spec, registered by name. ",
                                           "Gradients are announced in reverse layout order. ",
                                           "Rotary embeddings rotate pairs of query and key dimensions. ",
                                           "Grouped-query attention shares each key and value head. ",
                                           "The checkpoint is written, then sealed, then named latest. ",
                                           "RMSNorm divides by the root mean square of the row. ",
                                           "SwiGLU multiplies the SiLU of the gate by the up projection. ",
                                           "Every rank starts from the same seeded parameters. ",
                                           "The loss falls as the model learns the statistics of bytes. ",
                                           "Hugging Face names the projections q, k, v and o. ",
                                           "A resumed run ends where the uninterrupted run ends. "};
  std::string text;
  uint32_t state = 12345;
  for (int i = 0; i < 1500; ++i) {
    state = state * 1664525u + 1013904223u;
    text += kSentences[(state >> 16) % 12];
  }
  WriteFile(dir + "/input.txt", text);
  const ProcessResult r =
      RunCommand(DtrainBin() + " data convert-text --out " + dir + "/tok --seq-len 64 " + dir + "/input.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace dtrain::testing
