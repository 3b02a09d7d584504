// The Cap'n Proto messages a worker accepts (actors/worker_core: WorkerCore::step, export_kv, import_kv), on one
// WorkerCore initialised once with the bundled stories260K model (4-token blocks, 64 KV blocks, 16 swap blocks),
// running ahead (ACTORD_CPU_RUN_AHEAD=1: greedy steps are left pending and answered after the next, as on a GPU).
// Input: records (worker_messages.hpp), each a call with its message bytes; the worker keeps its per-sequence state
// from one record to the next, as between the steps of a run.
// Properties: no call crashes, reads or writes outside its buffers or has undefined behaviour; a malformed message
// may throw kj::Exception (the worker actor turns that into an error reply); any other exception is a crash; every
// reply is well formed.
// Every step is answered exactly once (a pending one before an export or import, as the worker actor does). Every
// sequence an input created is released after it, so inputs do not pile up state.
#include <cstdlib>
#include <set>

#include "actors/worker_core.hpp"
#include "comms/capnp_codec.hpp"
#include "fuzz_util.hpp"
#include "worker_messages.hpp"

using namespace actord;

namespace {

WorkerCore& worker() {
  static WorkerCore* core = [] {
    setenv("ACTORD_CPU_RUN_AHEAD", "1", 1);  // read by the CPU backend init makes
    auto* c = new WorkerCore(ModelRegistry::with_builtins());
    wire_msg init = build<wire::WorkerInit>([](wire::WorkerInit::Builder out) {
      out.setName("fuzz/worker");
      out.setModelPath((fuzz::source_dir() / "models/stories260K").string());
      out.setDtype("auto");
      out.setNumKvBlocks(64);
      out.setBlockSize(4);
      out.setKvDtype("F32");
      out.setNumSwapBlocks(16);
      out.setThreads(1);
    });
    const wire_msg ready = c->init(init);
    WireReader reader(ready);
    if (has_error(reader.root<wire::WorkerReady>().getError()))
      fuzz::fail("worker init: " + get_error(reader.root<wire::WorkerReady>().getError()).message);
    return c;
  }();
  return *core;
}

// Reads every field of a reply: replies are built by the worker, so they must always be readable.
template <class T>
void check_reply(const wire_msg& reply) {
  WireReader reader(reply);
  auto r = reader.root<T>();
  if constexpr (std::is_same_v<T, wire::StepResult>) {
    for (auto s : r.getResults()) (void)s.getLogprobs().getTopIds().size();
    for (auto p : r.getPromptLogprobs()) (void)p.getEntries().size();
  }
  if (has_error(r.getError())) fuzz::require(!get_error(r.getError()).message.empty(), "an error without a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  WorkerCore& core = worker();
  std::set<uint64_t> seen;
  size_t asked = 0, answered = 0;  // steps
  std::vector<wire_msg> done;
  auto take = [&] {
    for (const wire_msg& r : done) check_reply<wire::StepResult>(r);
    answered += done.size();
    done.clear();
  };
  auto finish_pending = [&] {
    if (core.has_pending()) done.push_back(core.finish_pending());
    take();
  };
  for (const auto& record : fuzz::read_records(data, size)) {
    try {
      switch (record.call) {
        case fuzz::WorkerCall::execute: {
          try {
            WireReader reader(record.msg);
            for (auto s : reader.root<wire::ExecuteStep>().getSeqs()) seen.insert(s.getSeqId());
          } catch (const kj::Exception&) {
          }
          ++asked;
          core.step(record.msg, done);
          take();
          break;
        }
        case fuzz::WorkerCall::export_kv:
          finish_pending();
          check_reply<wire::KvExport>(core.export_kv(record.msg));
          break;
        case fuzz::WorkerCall::import_kv:
          finish_pending();
          check_reply<wire::KvImported>(core.import_kv(record.msg));
          break;
      }
    } catch (const kj::Exception&) {  // a malformed message: the worker actor answers it with an error
      take();
      if (record.call == fuzz::WorkerCall::execute) {
        finish_pending();
        answered = asked;  // the error answers the steps left, as the worker actor's reply does
      }
    }
  }
  finish_pending();
  fuzz::require(answered == asked, "a step answered " + std::to_string(answered) + " times for " +
                                       std::to_string(asked) + " asked");
  const wire_msg release = build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
    auto ids = out.initReleased(static_cast<uint32_t>(seen.size()));
    uint32_t i = 0;
    for (uint64_t id : seen) ids.set(i++, id);
  });
  check_reply<wire::StepResult>(core.execute(release));
  fuzz::require(core.num_sequences() == 0, "sequences left after releasing every one the input named");
  return 0;
}
