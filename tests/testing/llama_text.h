#pragma once
// The llama e2e tests' data: byte tokens of a fixed English text, the same bytes on every run and checkout (the
// differences those tests measure depend on the data).

#include <string>

namespace dtrain::testing {

// Writes <dir>/input.txt (1500 sentences drawn from 12 by an LCG) and converts it with `dtrain data convert-text
// --seq-len 64` into <dir>/tok (records of 65 tokens). Fails the calling test (gtest ASSERT) if the conversion fails:
// call it under ASSERT_NO_FATAL_FAILURE.
void MakeLlamaTextData(const std::string& dir);

}  // namespace dtrain::testing
