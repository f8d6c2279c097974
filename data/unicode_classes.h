#pragma once
// The classes of Unicode code points that GPT-2's pre-tokenizer regex tells apart (data/gpt2_bpe.cc):
// letters (\p{L}: general categories Lu Ll Lt Lm Lo), numbers (\p{N}: Nd Nl No), white space (\s: the Unicode
// White_Space property, as Python's `regex` module and Rust's regex crate match it) and everything else. The
// table is generated from Python's unicodedata by scripts/gen_unicode_classes.py. Pure functions, thread-safe.

namespace dtrain::data {

enum class CodePointClass { kOther, kLetter, kNumber, kSpace };

// The class of `cp`; code points above U+10FFFF, surrogates and unassigned ones are kOther.
CodePointClass ClassifyCodePoint(char32_t cp);

// The Unicode version of the table ("14.0.0").
const char* UnicodeVersionOfClasses();

}  // namespace dtrain::data
