// KV export / import: a running sequence leaves one worker's KV pool (here a worker in its own process, so the KV
// bytes cross ZeroMQ as a bulk frame) for another worker's pool at different block ids, and continues there with
// exactly the tokens it would have produced without moving. Bad imports are refused with a reason.
#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "actors/actor_system_setup.hpp"
#include "actors/remote_worker_actor.hpp"
#include "actors/worker_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "plugins/model_registry.hpp"
#include "test_util.hpp"

using namespace actord;

namespace {

constexpr uint32_t kBlockSize = 4;

wire_msg call(caf::scoped_actor& self, const worker_actor& worker, auto atom, const wire_msg& msg) {
  wire_msg reply;
  self->request(worker, std::chrono::seconds(60), atom, msg)
      .receive([&](wire_msg& r) { reply = std::move(r); },
               [&](caf::error& e) { FAIL("worker request failed: " << self->system().render(e)); });
  return reply;
}

void init(caf::scoped_actor& self, const worker_actor& worker, const std::string& name, uint32_t num_blocks,
          const std::string& kv_dtype = "F32") {
  wire_msg msg = build<wire::WorkerInit>([&](wire::WorkerInit::Builder out) {
    out.setName(name);
    out.setModelPath(test::stories_dir().string());
    out.setDtype("auto");
    out.setNumKvBlocks(num_blocks);
    out.setBlockSize(kBlockSize);
    out.setKvDtype(kv_dtype);
    out.setThreads(1);
  });
  const wire_msg reply = call(self, worker, init_atom::value, msg);  // outlives the reader, which refers to it
  WireReader reader(reply);
  auto ready = reader.root<wire::WorkerReady>();
  REQUIRE_FALSE(has_error(ready.getError()));
}

// One sequence driven step by step (greedy), one step in flight at a time.
struct Driver {
  uint64_t seq_id;
  std::vector<int32_t> tokens;    // prompt + generated
  uint32_t prompt_len;
  uint32_t computed = 0;          // positions whose KV the worker holds
  std::vector<uint32_t> blocks;   // the worker's table for it
  std::vector<uint32_t> free_ids; // where its next blocks come from (popped from the back)
  bool sent = false;              // the worker has state for it

  // Feeds every token not computed yet, samples the next one.
  void step(caf::scoped_actor& self, const worker_actor& worker) {
    const uint32_t n = static_cast<uint32_t>(tokens.size()) - computed;
    std::vector<uint32_t> added;
    while (blocks.size() * kBlockSize < computed + n) {
      REQUIRE_FALSE(free_ids.empty());
      blocks.push_back(free_ids.back());
      added.push_back(free_ids.back());
      free_ids.pop_back();
    }
    static uint64_t step_id = 0;
    wire_msg msg = build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
      out.setStepId(++step_id);
      auto s = out.initSeqs(1)[0];
      s.setSeqId(seq_id);
      fill_list(s.initTokenIds(n), std::vector<int32_t>(tokens.begin() + computed, tokens.end()));
      s.setStartPos(computed);
      s.setSample(true);
      s.setSampleIndex(static_cast<uint32_t>(tokens.size()) - prompt_len);
      if (!sent) {
        s.setNewSequence(true);
        SamplingOptions greedy;
        greedy.temperature = 0.0f;
        to_wire(greedy, s.initSampling());
        s.setPromptLen(prompt_len);
        fill_list(s.initBlockTable(static_cast<uint32_t>(blocks.size())), blocks);
      } else {
        fill_list(s.initAppendBlocks(static_cast<uint32_t>(added.size())), added);
      }
    });
    const wire_msg reply = call(self, worker, step_atom::value, msg);
    WireReader reader(reply);
    auto result = reader.root<wire::StepResult>();
    REQUIRE_FALSE(has_error(result.getError()));
    REQUIRE(result.getResults().size() == 1);
    sent = true;
    computed += n;
    tokens.push_back(result.getResults()[0].getTokenId());
  }
  void run_until(caf::scoped_actor& self, const worker_actor& worker, size_t num_tokens) {
    while (tokens.size() < num_tokens) step(self, worker);
  }
};

std::vector<uint32_t> ids(uint32_t from, uint32_t to) {  // popped from the back: `from` first
  std::vector<uint32_t> v;
  for (uint32_t i = to; i-- > from;) v.push_back(i);
  return v;
}

wire_msg export_request(uint64_t seq_id, uint32_t num_tokens) {
  return build<wire::ExportKv>([&](wire::ExportKv::Builder out) {
    out.setCorrelationId(5);
    out.setSeqId(seq_id);
    out.setNumTokens(num_tokens);
  });
}

wire_msg import_request(const wire_msg& exported, const std::vector<uint32_t>& block_ids) {
  WireReader reader(exported);
  wire_msg msg = build<wire::ImportKv>([&](wire::ImportKv::Builder out) {
    out.setCorrelationId(6);
    out.setExport(reader.root<wire::KvExport>());
    fill_list(out.initBlockIds(static_cast<uint32_t>(block_ids.size())), block_ids);
  });
  msg.bulk = exported.bulk;
  return msg;
}

std::optional<std::string> import_error(caf::scoped_actor& self, const worker_actor& worker, const wire_msg& msg) {
  const wire_msg reply = call(self, worker, import_kv_atom::value, msg);
  WireReader reader(reply);
  auto imported = reader.root<wire::KvImported>();
  if (!has_error(imported.getError())) return std::nullopt;
  return get_error(imported.getError()).message;
}

// Stops the workers when the test case ends, failed or not (the actor system waits for them in its destructor).
struct StopAtEnd {
  caf::scoped_actor& self;
  std::vector<worker_actor> workers;
  ~StopAtEnd() {
    for (const auto& w : workers) self->send_exit(w, caf::exit_reason::user_shutdown);
  }
};

}  // namespace

TEST_CASE("kv migration - a running sequence moves to another pool and continues with identical output - f32 and "
          "int8 KV (codes and row scales move together)", "[kv][migration]") {
  const std::string kv_dtype = GENERATE(as<std::string>{}, "F32", "I8");
  INFO("KV dtype " << kv_dtype);
  ActordSystemConfig cfg(2);
  caf::actor_system system(cfg);
  caf::scoped_actor self{system};
  const ModelRegistry registry = ModelRegistry::with_builtins();
  WorkerProcessOptions process{test::actord_binary(), "test/worker/a", "warn"};
  worker_actor source = spawn_remote_worker(system, process);
  worker_actor target = spawn_worker(system, registry);
  StopAtEnd stop{self, {source, target}};
  init(self, source, "test/worker/a", 32, kv_dtype);
  init(self, target, "test/worker/b", 64, kv_dtype);

  const std::vector<int32_t> prompt{1, 365, 1473, 471, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257};
  std::vector<int32_t> safe_prompt;
  for (int32_t t : prompt) safe_prompt.push_back(t % 512);  // stories260K: vocabulary of 512
  constexpr size_t kTotal = 60;

  // Reference: the whole run on the target worker.
  Driver reference{1, safe_prompt, static_cast<uint32_t>(safe_prompt.size()), 0, {}, ids(0, 32)};
  reference.run_until(self, target, kTotal);

  // The same sequence starts on the source worker (in its own process)...
  Driver moving{7, safe_prompt, static_cast<uint32_t>(safe_prompt.size()), 0, {}, ids(3, 32)};
  moving.run_until(self, source, safe_prompt.size() + 10);
  const uint32_t computed = moving.computed;  // 13 prompt + 9 generated tokens fed: 6 blocks, the last one partial
  REQUIRE(computed == safe_prompt.size() + 9);

  // ... is exported as one message whose KV bytes ride as one bulk frame ...
  wire_msg exported = call(self, source, export_kv_atom::value, export_request(7, computed));
  {
    WireReader reader(exported);
    auto e = reader.root<wire::KvExport>();
    REQUIRE_FALSE(has_error(e.getError()));
    CHECK(e.getNumBlocks() == 6);
    CHECK(e.getLayout().getBlockSize() == kBlockSize);
    CHECK(std::string(e.getLayout().getDtype()) == kv_dtype);
    REQUIRE(exported.bulk.size() == 1);
    CHECK(exported.bulk[0].size() == 6 * e.getBlockBytes());
  }

  // ... imported into the target's pool at other block ids (reversed, above the reference's) ...
  const std::vector<uint32_t> target_ids{63, 61, 59, 57, 55, 53};
  REQUIRE_FALSE(import_error(self, target, import_request(exported, target_ids)));

  // ... and continues there as a new sequence over those blocks: the rest equals the reference.
  Driver moved{9, moving.tokens, moving.prompt_len, computed, target_ids, ids(40, 50)};
  moved.run_until(self, target, kTotal);
  CHECK(moved.tokens == reference.tokens);

  // The source still holds it until released; exporting a sequence nobody holds is refused.
  wire_msg unknown = call(self, source, export_kv_atom::value, export_request(12345, 4));
  WireReader reader(unknown);
  auto e = reader.root<wire::KvExport>();
  REQUIRE(has_error(e.getError()));
  CHECK_THAT(get_error(e.getError()).message, Catch::Contains("sequence 12345 is not held by this worker"));

}

TEST_CASE("kv migration - imports with the wrong shape, size or ids are refused and write nothing", "[kv][migration]") {
  ActordSystemConfig cfg(2);
  caf::actor_system system(cfg);
  caf::scoped_actor self{system};
  const ModelRegistry registry = ModelRegistry::with_builtins();
  worker_actor worker = spawn_worker(system, registry);
  worker_actor other = spawn_worker(system, registry);
  StopAtEnd stop{self, {worker, other}};
  init(self, worker, "test/worker/a", 16);
  Driver seq{3, {1, 2, 3, 4, 5, 6}, 6, 0, {}, ids(0, 16)};
  seq.run_until(self, worker, 8);
  wire_msg exported = call(self, worker, export_kv_atom::value, export_request(3, seq.computed));
  REQUIRE(exported.bulk.size() == 1);

  wire_msg truncated = import_request(exported, {10, 11});
  truncated.bulk[0].pop_back();
  CHECK_THAT(import_error(self, worker, truncated).value_or(""), Catch::Contains("expected one bulk frame of"));
  wire_msg no_frame = import_request(exported, {10, 11});
  no_frame.bulk.clear();
  CHECK_THAT(import_error(self, worker, no_frame).value_or(""), Catch::Contains("expected one bulk frame of"));
  CHECK_THAT(import_error(self, worker, import_request(exported, {10})).value_or(""),
             Catch::Contains("2 blocks exported, 1 block ids given"));
  CHECK_THAT(import_error(self, worker, import_request(exported, {10, 99})).value_or(""),
             Catch::Contains("block id 99 out of range"));

  wire_msg init_bf16 = build<wire::WorkerInit>([&](wire::WorkerInit::Builder out) {
    out.setName("test/worker/bf16");
    out.setModelPath(test::stories_dir().string());
    out.setNumKvBlocks(16);
    out.setBlockSize(kBlockSize);
    out.setKvDtype("BF16");
    out.setThreads(1);
  });
  call(self, other, init_atom::value, init_bf16);
  CHECK_THAT(import_error(self, other, import_request(exported, {10, 11})).value_or(""),
             Catch::Contains("the blocks have layout (layers 0..5 of 5, KV heads 0..4 of 4, head_dim 8, block_size 4, "
                             "F32), which does not cover this rank's (layers 0..5 of 5, KV heads 0..4 of 4, head_dim 8, "
                             "block_size 4, BF16)"));
  // The worker still serves: the sequence continues.
  seq.run_until(self, worker, 10);
}
