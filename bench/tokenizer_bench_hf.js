// The HF tokenizers library (Rust, through the npm package @anush008/tokenizers) on the documents that
// actord_tokenizer_bench saved, for a side-by-side figure:
//   per_call_mb_per_s   one awaited encode() per document (includes the Node binding's per-call cost)
//   batch_mb_per_s      encodeBatch() over chunks of 512 documents: the binding's cost amortised, so this is the
//                       Rust library's own speed. Rayon's pool size comes from RAYON_NUM_THREADS: run with
//                       RAYON_NUM_THREADS=1 for the single-thread figure, unset for all cores.
// Usage: NODE_PATH=<folder with node_modules> [RAYON_NUM_THREADS=1] node bench/tokenizer_bench_hf.js TOKENIZER_JSON
const fs = require("fs");
const { Tokenizer } = require("@anush008/tokenizers");
const docs = JSON.parse(fs.readFileSync("/tmp/actord_tokenizer_bench_docs.json", "utf8"));
const tok = Tokenizer.fromFile(process.argv[2]);
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
const seconds = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
(async () => {
  let t0 = process.hrtime.bigint();
  let tokens = 0;
  for (const d of docs) tokens += (await tok.encode(d, null, { addSpecialTokens: true })).getIds().length;
  const perCall = seconds(t0);
  const chunk = 512;
  let best = Infinity, batchTokens = 0;
  for (let rep = 0; rep < 3; ++rep) {
    t0 = process.hrtime.bigint();
    batchTokens = 0;
    for (let i = 0; i < docs.length; i += chunk) {
      for (const e of await tok.encodeBatch(docs.slice(i, i + chunk), { addSpecialTokens: true })) {
        batchTokens += e.getIds().length;
      }
    }
    best = Math.min(best, seconds(t0));
  }
  console.log(JSON.stringify({
    tokenizer: process.argv[2], bytes, tokens, rayon_threads: process.env.RAYON_NUM_THREADS || "all",
    per_call_mb_per_s: +(bytes / perCall / 1e6).toFixed(2), batch_mb_per_s: +(bytes / best / 1e6).toFixed(2),
    batch_tokens_match: batchTokens === tokens }));
})();
