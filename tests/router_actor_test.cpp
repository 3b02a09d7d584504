// The router actor, run deterministically on CAF's test coordinator (no threads, no sleeps): submissions reach a
// replica's scheduler as the tokenizer actor that sent them, least_tokens spreads them, requests wait while no
// replica takes any and go on when one joins, cancels reach every scheduler or end a waiting request, a
// continuation of a request cancelled meanwhile ends cancelled, stats are summed over the schedulers, and a policy
// message changes how the requests after it are spread.
#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "actors/actor_system_setup.hpp"
#include "actors/router_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

using namespace actord;

namespace {

// What a stand-in actor received: the atom's name, the request id in the message, who sent it.
struct Seen {
  std::string what;
  uint64_t id = 0;
  caf::actor_addr from;
  std::string finish;  // deltas: the first delta's finish reason
};
using Log = std::shared_ptr<std::vector<Seen>>;

wire_msg submit(uint64_t id, uint32_t prompt_len, uint32_t max_tokens) {
  return build<wire::SubmitRequest>([&](wire::SubmitRequest::Builder out) {
    out.setRequestId(id);
    auto ids = out.initPromptIds(prompt_len);
    for (uint32_t i = 0; i < prompt_len; ++i) ids.set(i, static_cast<int32_t>(10 + i));
    out.setMaxTokens(max_tokens);
    out.initSampling().setN(1);
  });
}

wire_msg cancel(uint64_t id) {
  return build<wire::CancelRequest>([&](wire::CancelRequest::Builder out) { out.setRequestId(id); });
}

// A stand-in scheduler or tokenizer: logs what it gets; answers stats with `steps` steps.
caf::behavior recorder(caf::event_based_actor* self, Log log, uint64_t steps) {
  return {
      [=](submit_atom, const wire_msg& m) {
        WireReader r(m);
        log->push_back({"submit", r.root<wire::SubmitRequest>().getRequestId(),
                        caf::actor_cast<caf::actor_addr>(self->current_sender()), ""});
      },
      [=](cancel_atom, const wire_msg& m) {
        WireReader r(m);
        log->push_back({"cancel", r.root<wire::CancelRequest>().getRequestId(),
                        caf::actor_cast<caf::actor_addr>(self->current_sender()), ""});
      },
      [=](delta_atom, const wire_msg& m) {
        WireReader r(m);
        auto deltas = r.root<wire::StreamDeltaBatch>().getDeltas();
        log->push_back({"delta", deltas[0].getRequestId(), caf::actor_cast<caf::actor_addr>(self->current_sender()),
                        deltas[0].getFinishReason() == wire::FinishReason::CANCELLED ? "cancelled" : "other"});
      },
      [=](stats_atom, const wire_msg&) -> wire_msg {
        SchedulerStats s;
        s.steps = steps;
        s.running_seqs = 1;
        return build<wire::SchedulerStats>([&](wire::SchedulerStats::Builder out) { to_wire(s, out); });
      },
  };
}

// A stand-in scheduler that goes down when asked for its statistics, without answering (a replica stopping while
// a stats request is in flight): the asker learns that it went down before its request times out.
caf::behavior quits_when_asked(caf::event_based_actor* self) {
  return {
      [=](stats_atom, const wire_msg&) -> caf::result<wire_msg> {
        auto never = self->make_response_promise<wire_msg>();
        self->quit();
        return never;
      },
  };
}

struct Fixture {
  ActordSystemConfig cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  Fixture() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }
  size_t count(const Log& log, const std::string& what) const {
    return static_cast<size_t>(std::count_if(log->begin(), log->end(), [&](const Seen& s) { return s.what == what; }));
  }
  // The router's answer to a StatsRequest: the total over its schedulers.
  std::optional<SchedulerStats> total_stats(const router_actor& router) {
    std::optional<SchedulerStats> total;
    auto asker = sys->spawn([&](caf::event_based_actor* self) {
      self->request(router, caf::infinite, stats_atom::value,
                    build<wire::StatsRequest>([](wire::StatsRequest::Builder out) { out.setCorrelationId(7); }))
          .then([&](const wire_msg& reply) {
            WireReader r(reply);
            total = from_wire(r.root<wire::SchedulerStats>());
          });
    });
    sched->run();
    caf::anon_send_exit(asker, caf::exit_reason::user_shutdown);
    sched->run();
    return total;
  }
  // The router's answer to a retiring scheduler's last statistics `last`.
  std::optional<bool> hand_last_stats(const router_actor& router, const caf::actor& scheduler, const SchedulerStats& last) {
    std::optional<bool> kept;
    auto handing = sys->spawn([&](caf::event_based_actor* self) {
      self->request(router, caf::infinite, stats_atom::value, scheduler,
                    build<wire::SchedulerStats>([&](wire::SchedulerStats::Builder out) { to_wire(last, out); }))
          .then([&](bool ok) { kept = ok; });
    });
    sched->run();
    caf::anon_send_exit(handing, caf::exit_reason::user_shutdown);
    sched->run();
    return kept;
  }
};

}  // namespace

TEST_CASE("router actor: forwards as the tokenizer, spreads by load, queues without replicas", "[router][actor]") {
  Fixture f;
  auto s0_log = std::make_shared<std::vector<Seen>>(), s1_log = std::make_shared<std::vector<Seen>>(),
       tok_log = std::make_shared<std::vector<Seen>>();
  auto s0 = f.sys->spawn(recorder, s0_log, 3), s1 = f.sys->spawn(recorder, s1_log, 4);
  auto tokenizer = f.sys->spawn(recorder, tok_log, 0);
  auto router = spawn_router(*f.sys, PhasePolicies{}, 16);

  caf::anon_send(router, join_atom::value, uint64_t{0}, s0, false, uint32_t{0});
  caf::anon_send(router, join_atom::value, uint64_t{1}, s1, false, uint32_t{0});
  caf::send_as(tokenizer, router, submit_atom::value, submit(1, 100, 100));  // to replica 0 (tie: lowest id)
  caf::send_as(tokenizer, router, submit_atom::value, submit(2, 10, 10));    // to replica 1: less booked
  caf::send_as(tokenizer, router, submit_atom::value, submit(3, 10, 10));    // replica 1 again (20 < 200)
  f.sched->run();
  REQUIRE(s0_log->size() == 1);
  CHECK(s0_log->at(0).id == 1);
  CHECK(s0_log->at(0).from == tokenizer.address());  // the scheduler answers the tokenizer, not the router
  REQUIRE(s1_log->size() == 2);
  CHECK(s1_log->at(1).from == tokenizer.address());
  caf::send_as(s0, router, load_atom::value, uint64_t{0});  // replica 0 finished its work
  caf::send_as(tokenizer, router, submit_atom::value, submit(4, 10, 10));
  f.sched->run();
  CHECK(s0_log->back().id == 4);

  // Both leave: a request waits in the router; a cancel ends it there.
  caf::anon_send(router, leave_atom::value, s0);
  caf::anon_send(router, leave_atom::value, s1);
  caf::send_as(tokenizer, router, submit_atom::value, submit(5, 4, 4));
  caf::send_as(tokenizer, router, submit_atom::value, submit(6, 4, 4));
  f.sched->run();
  CHECK(f.count(s0_log, "submit") + f.count(s1_log, "submit") == 4);
  caf::send_as(tokenizer, router, cancel_atom::value, cancel(5));
  f.sched->run();
  REQUIRE(tok_log->size() == 1);
  CHECK(tok_log->at(0).what == "delta");
  CHECK(tok_log->at(0).id == 5);
  CHECK(tok_log->at(0).finish == "cancelled");
  // A replica joins again: the waiting request goes there.
  caf::anon_send(router, join_atom::value, uint64_t{1}, s1, false, uint32_t{0});
  f.sched->run();
  CHECK(s1_log->back().what == "submit");
  CHECK(s1_log->back().id == 6);
  CHECK(s1_log->back().from == tokenizer.address());

  // A cancel reaches every scheduler known (the left one too, until it is down).
  caf::send_as(tokenizer, router, cancel_atom::value, cancel(6));
  f.sched->run();
  CHECK(s0_log->back().what == "cancel");
  CHECK(s1_log->back().what == "cancel");
  // The continuation of a request cancelled meanwhile (a scheduler handed it back) ends cancelled here.
  caf::send_as(s1, router, requeue_atom::value, tokenizer, submit(6, 4, 4));
  f.sched->run();
  CHECK(tok_log->back().id == 6);
  CHECK(tok_log->back().finish == "cancelled");
  CHECK(f.count(s1_log, "submit") == 3);

  // Stats: the sum over the schedulers known.
  const std::optional<SchedulerStats> total = f.total_stats(router);
  REQUIRE(total);
  CHECK(total->steps == 3 + 4);
  CHECK(total->running_seqs == 2);
  for (auto* a : {&s0, &s1, &tokenizer}) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  f.sched->run();
}

TEST_CASE("router actor: policy_atom changes each phase's policy for the requests routed after it - values that are "
          "no policy are ignored", "[router][actor]") {
  Fixture f;
  auto s0_log = std::make_shared<std::vector<Seen>>(), s1_log = std::make_shared<std::vector<Seen>>();
  auto s0 = f.sys->spawn(recorder, s0_log, 0), s1 = f.sys->spawn(recorder, s1_log, 0);
  auto router = spawn_router(*f.sys, PhasePolicies{}, 16);
  caf::anon_send(router, join_atom::value, uint64_t{0}, s0, false, uint32_t{0});
  caf::anon_send(router, join_atom::value, uint64_t{1}, s1, false, uint32_t{0});
  auto ids = [](const Log& log) {
    std::vector<uint64_t> out;
    for (const Seen& s : *log) out.push_back(s.id);
    return out;
  };
  caf::anon_send(router, submit_atom::value, submit(1, 100, 100));  // least_tokens: replica 0, then 1 and 1 again
  caf::anon_send(router, submit_atom::value, submit(2, 10, 10));
  caf::anon_send(router, submit_atom::value, submit(3, 10, 10));
  caf::anon_send(router, policy_atom::value, uint32_t(RoutePolicy::round_robin), uint32_t(RoutePolicy::round_robin));
  for (uint64_t id = 4; id <= 6; ++id) caf::anon_send(router, submit_atom::value, submit(id, 10, 10));  // in turn
  caf::anon_send(router, policy_atom::value, uint32_t{7}, uint32_t{0});  // ignored: still round_robin
  caf::anon_send(router, submit_atom::value, submit(7, 10, 10));
  f.sched->run();
  CHECK(ids(s0_log) == std::vector<uint64_t>{1, 4, 6});
  CHECK(ids(s1_log) == std::vector<uint64_t>{2, 3, 5, 7});
}

TEST_CASE("router actor: a retiring scheduler's last statistics, handed over before it stops, stay in the totals once "
          "it is gone - counters never go back", "[router][actor]") {
  Fixture f;
  auto s0_log = std::make_shared<std::vector<Seen>>(), s1_log = std::make_shared<std::vector<Seen>>();
  auto s0 = f.sys->spawn(recorder, s0_log, 3), s1 = f.sys->spawn(recorder, s1_log, 4);
  auto router = spawn_router(*f.sys, PhasePolicies{}, 16);
  caf::anon_send(router, join_atom::value, uint64_t{0}, s0, false, uint32_t{0});
  caf::anon_send(router, join_atom::value, uint64_t{1}, s1, false, uint32_t{0});
  f.sched->run();
  // s1 retires having stepped 9 times since anyone asked (the router saw none of those steps): its coordinator hands
  // its last statistics over, then stops it.
  SchedulerStats last;
  last.steps = 9;
  last.prefill_handoffs = 5;
  last.running_seqs = 2;  // a gauge: not counted once it is gone
  CHECK(f.hand_last_stats(router, s1, last) == true);
  caf::anon_send_exit(s1, caf::exit_reason::user_shutdown);
  f.sched->run();
  std::optional<SchedulerStats> total = f.total_stats(router);
  REQUIRE(total);
  CHECK(total->steps == 3 + 9);  // s0 now, s1's last
  CHECK(total->prefill_handoffs == 5);
  CHECK(total->running_seqs == 1);  // s0's only
  // Statistics for a scheduler the router does not know (gone already) are answered and ignored.
  CHECK(f.hand_last_stats(router, s1, last) == true);
  total = f.total_stats(router);
  REQUIRE(total);
  CHECK(total->steps == 3 + 9);
  caf::anon_send_exit(s0, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  f.sched->run();
}

TEST_CASE("router actor: a scheduler that goes down while its statistics are asked for counts once in that answer - "
          "its last counters, not lost", "[router][actor]") {
  Fixture f;
  auto s0_log = std::make_shared<std::vector<Seen>>();
  auto s0 = f.sys->spawn(recorder, s0_log, 3);
  auto s1 = f.sys->spawn(quits_when_asked);
  auto router = spawn_router(*f.sys, PhasePolicies{}, 16);
  caf::anon_send(router, join_atom::value, uint64_t{0}, s0, false, uint32_t{0});
  caf::anon_send(router, join_atom::value, uint64_t{1}, s1, false, uint32_t{0});
  f.sched->run();
  SchedulerStats last;  // s1's final counters, handed over as its replica retires
  last.steps = 9;
  last.prefill_handoffs = 10;
  CHECK(f.hand_last_stats(router, s1, last) == true);
  // Asked, s1 stops without answering: the router learns that it went down, then its request times out.
  std::optional<SchedulerStats> total;
  auto asker = f.sys->spawn([&](caf::event_based_actor* self) {
    self->request(router, caf::infinite, stats_atom::value,
                  build<wire::StatsRequest>([](wire::StatsRequest::Builder out) { out.setCorrelationId(8); }))
        .then([&](const wire_msg& reply) {
          WireReader r(reply);
          total = from_wire(r.root<wire::SchedulerStats>());
        });
  });
  f.sched->run();
  CHECK_FALSE(total);  // s1's answer is still awaited
  f.sched->trigger_timeouts();
  f.sched->run();
  caf::anon_send_exit(asker, caf::exit_reason::user_shutdown);
  f.sched->run();
  REQUIRE(total);
  CHECK(total->steps == 3 + 9);
  CHECK(total->prefill_handoffs == 10);
  total = f.total_stats(router);  // and after, from the counters of the schedulers gone
  REQUIRE(total);
  CHECK(total->steps == 3 + 9);
  CHECK(total->prefill_handoffs == 10);
  caf::anon_send_exit(s0, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  f.sched->run();
}
