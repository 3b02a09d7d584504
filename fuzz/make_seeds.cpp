// Writes the binary seed corpora of worker_fuzz and envelope_fuzz (capnp messages a run really sends: prefill,
// decode planned ahead, penalties, logprobs, prompt logprobs, forks, swaps, copies, KV export and import) into
// <corpus>/worker and <corpus>/envelope. Usage: actord_fuzz_seeds fuzz/corpus
#include <filesystem>
#include <fstream>
#include <iostream>
#include <zmq.hpp>

#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "worker_messages.hpp"

using namespace actord;
using fuzz::WorkerCall;

namespace {

constexpr uint32_t kBlockSize = 4;
constexpr uint64_t kBlockBytes = 5ull * 2 * 4 * kBlockSize * 8 * 4;  // stories260K: layers, k|v, kv heads, head_dim, f32

struct Slice {
  uint64_t seq = 1;
  std::vector<int32_t> tokens;
  uint32_t start = 0;
  bool new_sequence = false;
  std::vector<uint32_t> blocks;  // the whole table when new, the added blocks otherwise
  SamplingOptions sampling = [] {
    SamplingOptions o;
    o.temperature = 0.0f;
    return o;
  }();
  bool sample = true;
  uint32_t sample_index = 0;
  int32_t from_previous = -1;
  uint32_t prompt_len = 0;
  std::vector<int32_t> stop_ids;
  std::vector<int32_t> context;
  int32_t prompt_logprobs_from = -1;
  int32_t next_prompt_token = -1;
  uint32_t forks = 0;
};

struct Copies {
  std::vector<std::pair<uint32_t, uint32_t>> copy, swap_out, swap_in;
};

wire_msg step(const std::vector<Slice>& slices, const std::vector<uint64_t>& released = {}, const Copies& c = {}) {
  static uint64_t id = 0;
  return build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
    out.setCorrelationId(++id);
    out.setStepId(id);
    auto seqs = out.initSeqs(static_cast<uint32_t>(slices.size()));
    for (uint32_t i = 0; i < slices.size(); ++i) {
      const Slice& s = slices[i];
      auto w = seqs[i];
      w.setSeqId(s.seq);
      fill_list(w.initTokenIds(static_cast<uint32_t>(s.tokens.size())), s.tokens);
      w.setStartPos(s.start);
      w.setSample(s.sample);
      w.setSampleIndex(s.sample_index);
      w.setFromPrevious(s.from_previous);
      w.setNewSequence(s.new_sequence);
      if (s.new_sequence) {
        to_wire(s.sampling, w.initSampling());
        w.setPromptLen(s.prompt_len);
        fill_list(w.initBlockTable(static_cast<uint32_t>(s.blocks.size())), s.blocks);
        fill_list(w.initStopIds(static_cast<uint32_t>(s.stop_ids.size())), s.stop_ids);
        fill_list(w.initContextTokens(static_cast<uint32_t>(s.context.size())), s.context);
      } else {
        fill_list(w.initAppendBlocks(static_cast<uint32_t>(s.blocks.size())), s.blocks);
      }
      w.setPromptLogprobsFrom(s.prompt_logprobs_from);
      w.setNextPromptToken(s.next_prompt_token);
      w.setForks(s.forks);
    }
    auto ids = out.initReleased(static_cast<uint32_t>(released.size()));
    for (uint32_t i = 0; i < released.size(); ++i) ids.set(i, released[i]);
    auto fill = [](auto list, const std::vector<std::pair<uint32_t, uint32_t>>& v) {
      for (uint32_t i = 0; i < v.size(); ++i) {
        list[i].setSrc(v[i].first);
        list[i].setDst(v[i].second);
      }
    };
    fill(out.initCopyBlocks(static_cast<uint32_t>(c.copy.size())), c.copy);
    fill(out.initSwapOut(static_cast<uint32_t>(c.swap_out.size())), c.swap_out);
    fill(out.initSwapIn(static_cast<uint32_t>(c.swap_in.size())), c.swap_in);
  });
}

wire_msg export_kv(uint64_t seq, uint32_t num_tokens) {
  return build<wire::ExportKv>([&](wire::ExportKv::Builder out) {
    out.setCorrelationId(7);
    out.setSeqId(seq);
    out.setNumTokens(num_tokens);
  });
}

wire_msg import_kv(uint32_t num_tokens, const std::vector<uint32_t>& ids, const char* dtype = "F32") {
  const uint32_t n = (num_tokens + kBlockSize - 1) / kBlockSize;
  wire_msg msg = build<wire::ImportKv>([&](wire::ImportKv::Builder out) {
    out.setCorrelationId(8);
    auto e = out.initExport();
    e.setSeqId(1);
    e.setNumTokens(num_tokens);
    auto layout = e.initLayout();
    layout.setNumLayers(5);
    layout.setNumKvHeads(4);
    layout.setHeadDim(8);
    layout.setBlockSize(kBlockSize);
    layout.setDtype(dtype);
    e.setBlockBytes(kBlockBytes);
    e.setNumBlocks(n);
    fill_list(out.initBlockIds(static_cast<uint32_t>(ids.size())), ids);
  });
  msg.bulk.emplace_back(n * kBlockBytes, uint8_t{0});
  for (size_t i = 0; i < msg.bulk[0].size(); i += 4) msg.bulk[0][i + 3] = 0x3c;  // small floats
  return msg;
}

void write(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string records(const std::vector<std::pair<WorkerCall, wire_msg>>& calls) {
  std::string out;
  for (const auto& [call, msg] : calls) fuzz::write_record(out, call, msg);
  return out;
}

std::vector<uint32_t> range(uint32_t from, uint32_t to) {
  std::vector<uint32_t> v;
  for (uint32_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: actord_fuzz_seeds CORPUS_DIR (fuzz/corpus)\n";
    return 2;
  }
  const std::filesystem::path corpus = argv[1];
  const auto worker = corpus / "worker", envelope = corpus / "envelope";
  std::filesystem::create_directories(worker);
  std::filesystem::create_directories(envelope);

  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 285, 9};
  // Prefill, then two decode steps planned ahead (the token comes from the previous step), export, release.
  Slice prefill{.seq = 1, .tokens = prompt, .new_sequence = true, .blocks = {0, 1}, .prompt_len = 7};
  Slice decode1{.seq = 1, .tokens = {0}, .start = 7, .sample_index = 1, .from_previous = 0};
  Slice decode2{.seq = 1, .tokens = {0}, .start = 8, .blocks = {2}, .sample_index = 2, .from_previous = 0};
  write(worker / "prefill_decode_export",
        records({{WorkerCall::execute, step({prefill})}, {WorkerCall::execute, step({decode1})},
                 {WorkerCall::execute, step({decode2})}, {WorkerCall::export_kv, export_kv(1, 9)},
                 {WorkerCall::execute, step({}, {1})}}));
  // Chunked prefill of two sequences in one step, the second chunk next step.
  Slice a{.seq = 3, .tokens = {1, 403, 407}, .new_sequence = true, .blocks = {4}, .sample = false, .prompt_len = 6};
  Slice b{.seq = 4, .tokens = {1, 9}, .new_sequence = true, .blocks = {5}, .prompt_len = 2};
  Slice a2{.seq = 3, .tokens = {261, 378, 285}, .start = 3, .blocks = {6}, .prompt_len = 6};
  write(worker / "chunked_two_sequences",
        records({{WorkerCall::execute, step({a, b})}, {WorkerCall::execute, step({a2})}}));
  // Sampling with penalties, min_tokens over stop ids, logprobs, a cached prefix's context tokens.
  Slice sampled{.seq = 5, .tokens = {285, 9}, .start = 4, .new_sequence = true, .blocks = {7, 8}, .prompt_len = 6,
                .stop_ids = {2}, .context = {1, 403, 407, 261}};
  sampled.sampling = SamplingOptions{};
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.top_k = 20;
  sampled.sampling.top_p = 0.9f;
  sampled.sampling.min_p = 0.05f;
  sampled.sampling.repetition_penalty = 1.2f;
  sampled.sampling.frequency_penalty = 0.5f;
  sampled.sampling.presence_penalty = -0.5f;
  sampled.sampling.min_tokens = 3;
  sampled.sampling.logprobs = 5;
  sampled.sampling.seed = 42;
  write(worker / "penalties_logprobs", records({{WorkerCall::execute, step({sampled})}}));
  // Prompt logprobs over a prompt in two chunks.
  Slice plp{.seq = 6, .tokens = {1, 403, 407, 261}, .new_sequence = true, .blocks = {9, 10}, .sample = false,
            .prompt_len = 7, .prompt_logprobs_from = 1, .next_prompt_token = 378};
  plp.sampling.prompt_logprobs = 3;
  Slice plp2{.seq = 6, .tokens = {378, 285, 9}, .start = 4, .prompt_len = 7, .prompt_logprobs_from = 1};
  write(worker / "prompt_logprobs", records({{WorkerCall::execute, step({plp})}, {WorkerCall::execute, step({plp2})}}));
  // n = 4 samples forked from one prompt, then a copy-on-write of the partial block.
  Slice fork{.seq = 10, .tokens = prompt, .new_sequence = true, .blocks = {11, 12}, .prompt_len = 7, .forks = 4};
  fork.sampling.temperature = 1.0f;
  fork.sampling.n = 4;
  Copies cow;
  cow.copy = {{12, 13}, {12, 14}, {12, 15}};
  write(worker / "forks_copy_on_write",
        records({{WorkerCall::execute, step({fork})}, {WorkerCall::execute, step({}, {}, cow)}}));
  // Swap a sequence out to host blocks and back in elsewhere.
  Copies out, in;
  out.swap_out = {{0, 0}, {1, 1}};
  in.swap_in = {{0, 20}, {1, 21}};
  write(worker / "swap_out_in",
        records({{WorkerCall::execute, step({prefill})}, {WorkerCall::execute, step({}, {1}, out)},
                 {WorkerCall::execute, step({}, {}, in)}}));
  // KV import of an export (the layout of this worker), then the sequence continues over the imported blocks.
  Slice resumed{.seq = 1, .tokens = {9}, .start = 8, .new_sequence = true, .blocks = {30, 31, 32}, .prompt_len = 7};
  write(worker / "import_then_continue",
        records({{WorkerCall::import_kv, import_kv(8, {30, 31})}, {WorkerCall::execute, step({resumed})}}));
  write(worker / "import_wrong_layout", records({{WorkerCall::import_kv, import_kv(4, {40}, "BF16")}}));
  // A sequence near the model's 512 positions: a block table of 130 blocks (blocks may repeat).
  std::vector<uint32_t> long_table;
  for (uint32_t i = 0; i < 130; ++i) long_table.push_back(i % 64);
  Slice late{.seq = 20, .tokens = {1, 2}, .start = 508, .new_sequence = true, .blocks = long_table, .prompt_len = 510};
  write(worker / "late_positions", records({{WorkerCall::execute, step({late})}}));
  // Out-of-range ids and a step for a sequence the worker does not hold.
  Slice bad{.seq = 21, .tokens = {600}, .new_sequence = true, .blocks = {70}, .prompt_len = 1};
  Slice unknown{.seq = 99, .tokens = {5}, .start = 3};
  Copies bad_copy;
  bad_copy.copy = {{64, 0}};
  write(worker / "bad_ids", records({{WorkerCall::execute, step({bad})}, {WorkerCall::execute, step({unknown})},
                                     {WorkerCall::execute, step({}, {}, bad_copy)},
                                     {WorkerCall::export_kv, export_kv(42, 4)}}));

  // Envelopes: each frame its 2-byte length then its bytes.
  auto frames = [](wire::MessageKind kind, const wire_msg& body) {
    wire_msg header = build<wire::Envelope>([&](wire::Envelope::Builder out) {
      out.setKind(kind);
      out.setTarget("replica/0/worker/0");
    });
    std::string out;
    auto put = [&](const std::vector<uint8_t>& bytes) {
      out.push_back(static_cast<char>(bytes.size() & 0xff));
      out.push_back(static_cast<char>(bytes.size() >> 8));
      out.append(bytes.begin(), bytes.end());
    };
    put(header.bytes);
    put(body.bytes);
    for (const auto& b : body.bulk) put(std::vector<uint8_t>(b.begin(), b.begin() + std::min<size_t>(b.size(), 64)));
    return out;
  };
  wire_msg init = build<wire::WorkerInit>([](wire::WorkerInit::Builder out) {
    out.setName("replica/0/worker/0");
    out.setModelPath("models/stories260K");
    out.setNumKvBlocks(64);
    out.setBlockSize(16);
    out.setKvDtype("F32");
    auto plugins = out.initPlugins(1);
    plugins.set(0, "libplugin.so");
  });
  wire_msg ready = build<wire::WorkerReady>([](wire::WorkerReady::Builder out) {
    out.setName("replica/0/worker/0");
    set_error(out.initError(), Error{Errc::out_of_memory, "engine.kv_cache_memory: out of memory"});
  });
  wire_msg result = build<wire::StepResult>([](wire::StepResult::Builder out) {
    auto r = out.initResults(1);
    r[0].setTokenId(5);
    TokenLogprobs lp{-0.5f, {5, 7}, {-0.5f, -1.5f}};
    to_wire(lp, r[0].initLogprobs());
    auto p = out.initPromptLogprobs(1);
    to_wire(lp, p[0].initEntries(1)[0]);
  });
  write(envelope / "worker_init", frames(wire::MessageKind::WORKER_INIT, init));
  write(envelope / "worker_ready_error", frames(wire::MessageKind::WORKER_READY, ready));
  write(envelope / "execute_step", frames(wire::MessageKind::EXECUTE_STEP, step({sampled, plp})));
  write(envelope / "step_result", frames(wire::MessageKind::STEP_RESULT, result));
  write(envelope / "import_kv_bulk", frames(wire::MessageKind::IMPORT_KV, import_kv(4, {3})));
  write(envelope / "export_kv", frames(wire::MessageKind::EXPORT_KV, export_kv(1, 9)));
  write(envelope / "shutdown", frames(wire::MessageKind::SHUTDOWN, wire_msg{}));
  std::cout << "seeds written to " << worker << " and " << envelope << "\n";
  return 0;
}
