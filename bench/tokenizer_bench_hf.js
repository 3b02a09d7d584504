// The HF tokenizers library (Rust, through the npm package @anush008/tokenizers) on the documents that
// actord_tokenizer_bench saved: single-threaded encode throughput, for a side-by-side figure.
// Usage: NODE_PATH=<folder with node_modules> node bench/tokenizer_bench_hf.js TOKENIZER_JSON
const fs = require("fs");
const { Tokenizer } = require("@anush008/tokenizers");
const docs = JSON.parse(fs.readFileSync("/tmp/actord_tokenizer_bench_docs.json", "utf8"));
const tok = Tokenizer.fromFile(process.argv[2]);
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
(async () => {
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (const d of docs) tokens += (await tok.encode(d, null, { addSpecialTokens: true })).getIds().length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ tokenizer: process.argv[2], bytes, tokens, single_thread_mb_per_s: bytes / s / 1e6 }));
})();
