// Sequences leaving a replica with their KV and arriving at another (actors/kv_move.hpp): the scheduler's side of
// engine.reshape_kv: move (a replica replaced by a reshape) and of a prefill replica's hand-offs to decode replicas.
#include <functional>
#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "actors/kv_move.hpp"
#include "actors/scheduler_state.hpp"
#include "actors/step_messages.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord::sched {

// Continuations still importing their KV, or waiting for blocks to, go back to the router as they came (with their
// KV).
void hand_back_imports(self_ptr self) {
  auto& st = self->state;
  for (const auto& lane : st.lanes) {
    for (auto& [sink, msg] : lane->awaiting_blocks) self->send(st.router, requeue_atom::value, sink, std::move(msg));
    lane->awaiting_blocks.clear();
    lane->import_wanted = 0;
  }
  for (auto& [id, imp] : st.importing) {
    imp->handed_back = true;
    self->send(st.router, requeue_atom::value, imp->sink, std::move(imp->submit));
  }
  st.importing.clear();
}

namespace {

// Reads sequence `id`'s first `tokens` KV positions out of the lane's KV ranks (ExportKv to each: its stage's
// layers, its KV heads) and calls `done` with them gathered into the whole model's blocks (actors/kv_move.hpp), or
// with nothing when a rank failed or did not answer within kKvMoveTimeout (the sequence is recomputed where it goes).
void read_kv(self_ptr self, const Lane& lane, uint64_t id, int tokens,
             std::function<void(std::optional<wire_msg>)> done) {
  struct Reading {
    std::vector<wire_msg> exports;  // one per KV rank of the lane
    size_t left = 0;
    std::function<void(std::optional<wire_msg>)> done;
  };
  auto reading = std::make_shared<Reading>();
  reading->exports.resize(1 + lane.followers.size());
  reading->left = reading->exports.size();
  reading->done = std::move(done);
  const wire_msg request = export_request(id, tokens);
  auto ask = [&](const worker_actor& rank, size_t slot) {
    auto got = [reading, slot](wire_msg reply) {
      reading->exports[slot] = std::move(reply);
      if (--reading->left == 0) reading->done(gather_kv(reading->exports));
    };
    self->request(rank, kKvMoveTimeout, export_kv_atom::value, request)
        .then([=](wire_msg& reply) { got(std::move(reply)); },
              [=](const caf::error&) { got(wire_msg{}); });  // gather_kv refuses an empty message
  };
  ask(lane.worker, 0);
  for (size_t f = 0; f < lane.followers.size(); ++f) ask(lane.followers[f], f + 1);
}

}  // namespace

// A reshape replaces this replica: every sequence goes back to the router, as a continuation; with move_kv each
// one whose KV can move takes it along (read_kv), in the order they arrived. `rp` is answered once all went.
void migrate_all(self_ptr self, caf::typed_response_promise<bool> rp) {
  auto& st = self->state;
  struct Leaving {
    SequenceRequest request;
    std::optional<wire_msg> kv;  // none: it is recomputed
  };
  struct Migration {
    std::vector<Leaving> seqs;
    size_t left = 0;  // sequences whose KV is still being read
    caf::typed_response_promise<bool> rp;
  };
  hand_back_imports(self);  // those still importing go on with the KV they came with
  flush_hand_offs(self);
  auto m = std::make_shared<Migration>();
  m->rp = std::move(rp);
  auto finish = [self, m]() {
    auto& s = self->state;
    size_t moved = 0;
    for (Leaving& leaving : m->seqs) {
      if (leaving.kv) {
        ++s.stats.kv_moves_out;
        ++moved;
      }
      self->send(s.router, requeue_atom::value, s.submitters[leaving.request.owner],
                 encode_submit(leaving.request, leaving.kv ? &*leaving.kv : nullptr));
    }
    spdlog::info("{}: replaced: {} sequences go on elsewhere, {} with their KV", s.actor_name, m->seqs.size(), moved);
    requeue_pending(self);
    end_drain(s);
    m->rp.deliver(true);
  };
  for (const auto& lane : st.lanes) {
    std::unordered_map<uint64_t, int> movable;
    if (st.move_kv)
      for (const auto& [id, tokens] : lane->batcher->movable_kv()) movable.emplace(id, tokens);
    HandBack back = lane->batcher->take_all();
    for (const SequenceUpdate& u : back.cancelled) emit(self, u);
    for (SequenceRequest& req : back.requests) {
      st.arrivals.erase(req.id);
      const size_t at = m->seqs.size();
      auto it = movable.find(req.id);
      m->seqs.push_back(Leaving{std::move(req), std::nullopt});
      if (it == movable.end() || it->second <= 0) continue;
      ++m->left;  // the answers come in later activations, once every read is counted
      read_kv(self, *lane, it->first, it->second, [m, finish, at](std::optional<wire_msg> kv) {
        m->seqs[at].kv = std::move(kv);
        if (--m->left == 0) finish();
      });
    }
  }
  if (m->left == 0) finish();
}

// Sends the lane's KV ranks the continuation's KV for `blocks`; it joins the batcher when all wrote it (or, if one
// failed, without it: recomputed).
void import_kv(self_ptr self, Lane& lane, SequenceRequest req, const caf::actor& sink, const wire_msg& submit,
               std::vector<uint32_t> blocks, int kv_tokens) {
  auto& st = self->state;
  auto imp = std::make_shared<Import>();
  imp->sink = sink;
  imp->submit = submit;
  imp->lane = &lane;
  imp->blocks = std::move(blocks);
  imp->kv_tokens = kv_tokens;
  imp->left = 1 + lane.followers.size();
  const wire_msg request = import_request_of(submit, imp->blocks);
  const uint64_t id = req.id;
  imp->request = std::move(req);
  st.importing.emplace(id, imp);
  auto done = [=](bool ok) {
    imp->ok = imp->ok && ok;
    if (--imp->left > 0 || imp->handed_back) return;
    auto& s = self->state;
    s.importing.erase(id);
    BatchScheduler& batcher = *imp->lane->batcher;
    if (!s.worker_failure.empty()) {  // this replica is going: the continuation goes on elsewhere, with its KV
      batcher.return_blocks(imp->blocks);
      self->send(s.router, requeue_atom::value, imp->sink, std::move(imp->submit));
    } else if (imp->cancelled) {
      batcher.return_blocks(imp->blocks);
      SequenceUpdate u;
      u.id = id;
      u.finish = Finish::cancelled;
      u.owner = imp->request.owner;
      u.prompt_tokens = static_cast<uint32_t>(imp->request.prompt.size());
      emit(self, u);
    } else {
      if (!imp->ok) batcher.return_blocks(imp->blocks);
      ++s.stats.kv_moves_in;
      if (auto refused = batcher.add(std::move(imp->request), std::move(imp->blocks), imp->ok ? imp->kv_tokens : 0))
        emit(self, *refused);
    }
    report_load(self);
    maybe_step(self);
  };
  auto ask = [&](const worker_actor& rank) {
    self->request(rank, kKvMoveTimeout, import_kv_atom::value, request)
        .then(
            [=](const wire_msg& reply) {
              WireReader reader(reply);
              done(!has_error(reader.root<wire::KvImported>().getError()));
            },
            [=](const caf::error&) { done(false); });
  };
  ask(lane.worker);
  for (const auto& f : lane.followers) ask(f);
}

void hand_off_prefilled(self_ptr self, Lane& lane) {
  auto& st = self->state;
  std::vector<HandOff> off = lane.batcher->take_handed_off();
  for (HandOff& h : off) {
    const uint64_t id = h.continuation.id;
    st.arrivals.erase(id);
    auto leaving = std::make_shared<HandOffInFlight>();
    leaving->request = std::move(h.continuation);
    leaving->lane = &lane;  // lanes live as long as the actor
    st.handing_off.emplace(id, leaving);
    read_kv(self, lane, id, h.kv_tokens, [self, leaving](std::optional<wire_msg> kv) {
      if (leaving->sent) return;  // flush_hand_offs sent it on already
      auto& s = self->state;
      leaving->sent = true;
      ++s.stats.prefill_handoffs;
      if (kv) ++s.stats.kv_moves_out;
      const uint64_t id = leaving->request.id;
      self->send(s.router, requeue_atom::value, s.submitters[leaving->request.owner],
                 encode_submit(leaving->request, kv ? &*kv : nullptr));
      leaving->lane->batcher->release_handed_off(id);
      s.handing_off.erase(id);
      tend_lease(self, *leaving->lane);
      maybe_step(self);
      report_load(self);  // answers a drain once nothing is left
    });
  }
}

void flush_hand_offs(self_ptr self) {
  auto& st = self->state;
  for (auto& [id, leaving] : st.handing_off) {
    leaving->sent = true;
    ++st.stats.prefill_handoffs;
    self->send(st.router, requeue_atom::value, st.submitters[leaving->request.owner], encode_submit(leaving->request));
  }
  st.handing_off.clear();
}

// The continuations that waited for lane's lease to grow: imported now, or (the pool has no more) recomputed.
void retry_imports(self_ptr self, Lane& lane) {
  auto waiting = std::move(lane.awaiting_blocks);
  lane.awaiting_blocks.clear();
  lane.import_wanted = 0;
  for (auto& [sink, msg] : waiting) handle_submit(self, sink, msg);
}

}  // namespace actord::sched
