// The scheduler actor's state and the helpers its files share (scheduler_actor.cpp: steps, results, leases,
// hand-backs; scheduler_kv_moves.cpp: sequences leaving and arriving with their KV). Internal to the scheduler actor:
// nothing else includes it.
#pragma once

#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/tell.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/trace_sink.hpp"
#include "core/scheduler_stats.hpp"
#include "memory/block_allocator.hpp"
#include "scheduler/batch_scheduler.hpp"
#include "scheduler/eplb_planner.hpp"
#include "scheduler/overlap_chooser.hpp"
#include "scheduler/step_clock.hpp"
#include "scheduler/step_deadline.hpp"
#include "scheduler/step_shape.hpp"

namespace actord::sched {

// One lane's scheduling: its lease from its kv_pool, its batcher, its ranks.
struct Lane {
  BlockAllocator lease;                       // blocks leased from the kv_pool
  std::unique_ptr<BatchScheduler> batcher;
  worker_actor worker;                        // the lane's driver rank: answers each step
  std::vector<worker_actor> followers;        // its other tensor/pipeline parallel ranks: get each step too
  kv_pool_actor kv_pool;
  std::string holder;                         // the lease's holder name
  bool lease_ready = false;
  bool lease_growing = false;                 // a lease request is on its way to the kv_pool
  bool pool_exhausted = false;                // the last grant fell short: ask again only after giving back
  // Continuations with KV waiting for the lease to grow before their import (their submitter, as they came), and
  // the blocks they need.
  std::deque<std::pair<caf::actor, wire_msg>> awaiting_blocks;
  size_t import_wanted = 0;
};

// A continuation arriving with its KV (actors/kv_move.hpp): blocks taken from the lane's lease, the lane's KV ranks
// writing their layers and heads into them; it joins the lane's batcher once all have answered.
struct Import {
  SequenceRequest request;
  caf::actor sink;                   // its submitter
  wire_msg submit;                   // as it came (with its KV): what goes back to the router if this replica goes
  Lane* lane = nullptr;
  std::vector<uint32_t> blocks;
  int kv_tokens = 0;
  size_t left = 0;                   // ranks yet to answer
  bool ok = true;                    // every rank wrote its part
  bool cancelled = false;
  bool handed_back = false;          // this replica went (lost, migrated) meanwhile: it went back to the router
};

// A prefilled sequence on its way to a decode replica (hand_off_prefilled) while its KV is read out.
struct HandOffInFlight {
  SequenceRequest request;
  Lane* lane = nullptr;
  bool sent = false;  // its continuation went to the router (without KV if the replica went first)
};

struct scheduler_state {
  std::string actor_name;
  bool move_kv = true;                        // engine.reshape_kv: a migrate sends sequences with their KV
  std::unordered_map<uint64_t, std::shared_ptr<Import>> importing;  // by request id
  // Prefilled sequences whose KV is being read out (hand_off_prefilled), by request id.
  std::unordered_map<uint64_t, std::shared_ptr<HandOffInFlight>> handing_off;
  std::vector<std::unique_ptr<Lane>> lanes;   // one, or the attention data parallel lanes (stable addresses)
  std::vector<worker_actor> ffn_pool;         // AFD: the FFN ranks, which get every step (as an idle lane's)
  int micro_batches = 0;                      // two-batch overlap: the ranks' micro-batches per step (0: none)
  std::vector<uint32_t> lane_micro_tokens;    // scratch: the busiest lane's tokens per micro-batch
  std::unique_ptr<OverlapChooser> overlap_chooser;  // tbo: auto: whether each step is cut (null: as configured)
  std::unique_ptr<StepDeadline> deadline;     // when to give up on a step's result
  bool deadline_check_armed = false;          // a deadline_atom is on its way to this actor
  caf::actor supervisor;                      // told when the worker is lost (the coordinator)
  router_actor router;                        // where sequences go back when the worker is lost or it drains
  std::string worker_failure;                 // non-empty once the worker was lost: everything goes back
  uint64_t abandoned_through = 0;             // results of steps up to this id are dropped (failed already)
  size_t lanes_ready = 0;                     // lanes holding their first lease
  std::vector<std::pair<caf::actor, wire_msg>> pending;   // submissions that arrived before the leases
  // Who gets a request's deltas, indexed by SequenceRequest::owner: each distinct submitter once (engines and
  // front ends are few and long-lived).
  std::vector<caf::actor> submitters;
  uint64_t next_step_id = 1;
  SchedulerStats stats;
  // Whether the drivers' results carry an expert load (an MoE model; unknown before the first result): then the
  // followers' results are read too (their stages' layers).
  std::optional<bool> expert_load;
  std::unique_ptr<EplbPlanner> eplb;
  std::shared_ptr<TraceSink> trace;          // --trace: null when off
  std::vector<int32_t> placement_to_send;    // EPLB: for the next ExecuteStep; empty: none
  uint64_t own_ns = 0;                        // stats.scheduler_us, in nanoseconds
  uint64_t send_ns = 0;                       // stats.scheduler_send_us, in nanoseconds
  struct Sent {
    std::chrono::steady_clock::time_point at;
    bool decode_only;
    uint64_t step_id = 0;
    uint32_t prefill_tokens = 0;
    uint32_t decode_tokens = 0;
    std::optional<uint64_t> expected_us;     // its expected compute; nullopt: unknown
    std::optional<std::chrono::steady_clock::time_point> deadline;  // nullopt: none
    std::vector<uint8_t> planned;            // per lane: its batcher planned this step (else it ran an empty one)
    std::vector<wire_msg> results;           // per lane, as they come
    std::vector<uint64_t> received_ns;       // per lane: when its result came (--trace: clock alignment)
    size_t pending = 0;                      // results still to come (the lanes'; with --trace the followers' too)
    StepShape shape;                         // the lanes' slices together (--trace)
    uint32_t tokens = 0;                     // the busiest lane's tokens
    bool split = true;                       // two-batch overlap: the ranks cut it into micro-batches (tbo: auto)
  };
  std::deque<Sent> in_flight;                 // steps sent and not answered, oldest first
  StepClock clock;                            // each step's share of the wall clock (stats.prefill_us / decode_us)
  std::vector<const StepPlan*> plans;         // scratch: each lane's plan of the step being sent
  std::vector<StepSample> samples;            // scratch for decoding results
  std::vector<StepPromptLogprobs> prompt_logprobs;  // scratch for decoding results
  double compute_us_avg = 0;                  // moving average of the worker's time per step
  // Queue time (arrival -> first step that carries the request), reported in the request's next delta: arrivals
  // of requests not scheduled yet, and times measured and not yet reported.
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> arrivals;
  std::unordered_map<uint64_t, uint64_t> queue_micros;
  std::optional<caf::typed_response_promise<bool>> drain;  // draining: answered once the running sequences are done
  static inline const char* name = "scheduler";
};

// Lanes step together: at most this many steps in flight when there are several (one lane: its batcher decides).
constexpr size_t kMaxLaneStepsInFlight = 3;

// A request handed back for failures more often than this in a row, without a token generated between them, ends with
// an error instead (one that kills every worker it reaches).
constexpr uint32_t kMaxHandBacks = 3;

// How long a rank may take to export or import a moving sequence's KV before it is recomputed instead.
constexpr auto kKvMoveTimeout = std::chrono::seconds(10);

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

uint64_t thread_cpu_ns();

// Runs `send` (a CAF send or request) and books its CPU time as sending (handing the message to CAF, waking the
// receiver's thread when it sleeps: a futex wake, an inter-processor interrupt in a VM), apart from the
// scheduler's own work. CPU time, not wall time: a woken receiver may take the core for a while.
template <class Send>
void timed_send(scheduler_state& st, Send&& send) {
  const uint64_t t0 = thread_cpu_ns();
  send();
  st.send_ns += thread_cpu_ns() - t0;
}

// Books one activation's CPU time as the scheduler's own, less what it spent sending.
inline void book_own_time(scheduler_state& st, uint64_t cpu_ns, uint64_t send_ns_before) {
  const uint64_t sending = st.send_ns - send_ns_before;
  st.own_ns += cpu_ns > sending ? cpu_ns - sending : 0;
}

uint64_t thread_cpu_ns();
// Sends the updates to their submitters: one StreamDeltaBatch per submitter.
void emit(self_ptr self, std::span<const SequenceUpdate> updates);
void emit(self_ptr self, const SequenceUpdate& u);
// Answers the drain request, if one waits.
void end_drain(scheduler_state& st);
// Submissions that came before the lease go back to the router as they are.
void requeue_pending(self_ptr self);
// Reports the outstanding tokens to the router and answers a drain once nothing is left.
void report_load(self_ptr self);
// Grows a lane's lease when a plan (or an import) ran short, gives back a surplus when idle.
void tend_lease(self_ptr self, Lane& lane);
// Plans and sends the steps there are, booking the scheduler's time.
void maybe_step(self_ptr self);
// The lane with the fewest tokens still to compute and generate.
Lane& least_loaded_lane(scheduler_state& st);
// A submission (or a continuation, with its KV or not) from `sink`.
void handle_submit(self_ptr self, const caf::actor& sink, const wire_msg& msg);

// scheduler_kv_moves.cpp.
// Continuations still importing their KV, or waiting for blocks to, go back to the router as they came (with it).
void hand_back_imports(self_ptr self);
// A reshape replaces this replica: every sequence goes back to the router; with move_kv those that can take their
// KV along (actors/kv_move.hpp). `rp` is answered once all went.
void migrate_all(self_ptr self, caf::typed_response_promise<bool> rp);
// A continuation with KV into `blocks` of `lane`: every KV rank of the lane writes its part, then it joins the
// batcher (recomputed if a write failed).
void import_kv(self_ptr self, Lane& lane, SequenceRequest req, const caf::actor& sink, const wire_msg& submit,
               std::vector<uint32_t> blocks, int kv_tokens);
// The continuations that waited for lane's lease to grow: imported now, or (the pool has no more) recomputed.
void retry_imports(self_ptr self, Lane& lane);
// Prefill/decode disaggregation (a replica of role prefill): the lane's sequences whose prefill is done (their
// first token reported) go to the router as continuations with their KV, exported from the lane's KV ranks and
// gathered (as migrate_all's), as their submitters; the router sends them to a decode replica. Their blocks go back
// to the lease once the exports came. A failed export sends the continuation without KV (recomputed there); none
// is lost if the replica is lost meanwhile.
void hand_off_prefilled(self_ptr self, Lane& lane);
// The replica goes (lost, replaced): the hand-offs still reading their KV go to the router now, without it.
void flush_hand_offs(self_ptr self);

}  // namespace actord::sched
