// The tokenizer actor, run deterministically on CAF's test coordinator (no threads, no sleeps), between a stand-in
// client, a stand-in router (a typed router_actor) and deltas as a scheduler sends them: a request before any router
// ends with an error; a text prompt goes on encoded (BOS added), with the model's end-of-sequence ids added to its
// stop ids, as the tokenizer actor; deltas come back as text, the prompt's ids in each sample's first; a stop string
// ends its sample here (finish stop, the text before it), cancels it at the router and drops the scheduler's last
// word on it; a client's cancel reaches the router once per sample still running; a request id in use is refused.
#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "actors/actor_system_setup.hpp"
#include "actors/router_interface.hpp"
#include "actors/tokenizer_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

namespace {

// One delta the client got.
struct ClientDelta {
  uint64_t id = 0;
  std::string text;
  wire::FinishReason finish = wire::FinishReason::NONE;
  std::string error;
  size_t prompt_ids = 0;
};
// What the stand-in router got.
struct RouterSaw {
  std::string what;  // submit or cancel
  uint64_t id = 0;
  std::vector<int32_t> prompt_ids, stop_ids;
  caf::actor_addr from;
};

struct Logs {
  std::vector<std::vector<ClientDelta>> client;  // one entry per batch
  std::vector<RouterSaw> router;
};

caf::behavior client_impl(caf::event_based_actor*, std::shared_ptr<Logs> logs) {
  return {
      [=](delta_atom, const wire_msg& m) {
        WireReader r(m);
        std::vector<ClientDelta> batch;
        for (auto d : r.root<wire::StreamDeltaBatch>().getDeltas()) {
          ClientDelta c;
          c.id = d.getRequestId();
          c.text = d.getText();
          c.finish = d.getFinishReason();
          if (has_error(d.getError())) c.error = get_error(d.getError()).message;
          c.prompt_ids = d.getPromptIds().size();
          batch.push_back(c);
        }
        logs->client.push_back(batch);
      },
  };
}

router_actor::behavior_type router_impl(router_actor::pointer self, std::shared_ptr<Logs> logs) {
  return {
      [=](submit_atom, const wire_msg& m) {
        WireReader r(m);
        auto in = r.root<wire::SubmitRequest>();
        logs->router.push_back({"submit", in.getRequestId(), to_vector<int32_t>(in.getPromptIds()),
                                to_vector<int32_t>(in.getStopIds()),
                                caf::actor_cast<caf::actor_addr>(self->current_sender())});
      },
      [=](requeue_atom, const caf::actor&, const wire_msg&) {},
      [=](cancel_atom, const wire_msg& m) {
        WireReader r(m);
        logs->router.push_back({"cancel", r.root<wire::CancelRequest>().getRequestId(), {}, {},
                                caf::actor_cast<caf::actor_addr>(self->current_sender())});
      },
      [=](join_atom, uint64_t, const caf::actor&, bool, uint32_t) {},
      [=](leave_atom, const caf::actor&) { return true; },
      [=](load_atom, uint64_t) {},
      [=](policy_atom, uint32_t, uint32_t) {},
      [=](stats_atom, const wire_msg& m) { return m; },
      [=](stats_atom, const caf::actor&, const wire_msg&) { return true; },
  };
}

wire_msg text_request(uint64_t id, const std::string& prompt, uint32_t n, std::vector<std::string> stops) {
  return build<wire::SubmitRequest>([&](wire::SubmitRequest::Builder out) {
    out.setRequestId(id);
    out.setPromptText(prompt);
    out.setTokenizePrompt(true);
    out.setMaxTokens(16);
    out.initSampling().setN(n);
    auto list = out.initStopStrings(static_cast<uint32_t>(stops.size()));
    for (uint32_t i = 0; i < stops.size(); ++i) list.set(i, stops[i]);
  });
}

// A scheduler's batch: each (sample id, tokens, finish).
struct Delta {
  uint64_t id;
  std::vector<int32_t> tokens;
  wire::FinishReason finish = wire::FinishReason::NONE;
};
wire_msg deltas(const std::vector<Delta>& list) {
  return build<wire::StreamDeltaBatch>([&](wire::StreamDeltaBatch::Builder out) {
    auto ds = out.initDeltas(static_cast<uint32_t>(list.size()));
    for (uint32_t i = 0; i < list.size(); ++i) {
      ds[i].setRequestId(list[i].id);
      fill_list(ds[i].initTokenIds(static_cast<uint32_t>(list[i].tokens.size())), list[i].tokens);
      ds[i].setFinishReason(list[i].finish);
    }
  });
}

wire_msg cancel(uint64_t id) {
  return build<wire::CancelRequest>([&](wire::CancelRequest::Builder out) { out.setRequestId(id); });
}

}  // namespace

TEST_CASE("tokenizer actor: encodes and submits as itself, streams text, ends samples at stop strings, cancels",
          "[tokenizer][actor]") {
  auto loaded = Tokenizer::load(test::stories_dir());
  REQUIRE(loaded.ok());
  auto tok = std::make_shared<const Tokenizer>(std::move(*loaded));
  ActordSystemConfig cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys(cfg);
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto logs = std::make_shared<Logs>();
  auto client = sys.spawn(client_impl, logs);
  auto scheduler = sys.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](int) {}}; });
  auto tokenizer = spawn_tokenizer(sys, tok);

  // No router yet: the request ends here, with an error naming why.
  caf::send_as(client, tokenizer, submit_atom::value, text_request(10, "Once upon a time", 1, {}));
  sched.run();
  REQUIRE(logs->client.size() == 1);
  REQUIRE(logs->client[0].size() == 1);
  CHECK(logs->client[0][0].finish == wire::FinishReason::ERROR);
  CHECK(logs->client[0][0].error.find("no router") != std::string::npos);

  auto router = sys.spawn(router_impl, logs);
  bool routed = false;
  auto asker = sys.spawn([&](caf::event_based_actor* self) {
    self->request(tokenizer, caf::infinite, route_atom::value, router).then([&](bool ok) { routed = ok; });
  });
  sched.run();
  REQUIRE(routed);

  // A text prompt: encoded with BOS, the model's stop ids added, submitted as the tokenizer actor.
  const std::string prompt = "Once upon a time";
  caf::send_as(client, tokenizer, submit_atom::value, text_request(20, prompt, 1, {" the"}));
  sched.run();
  REQUIRE(logs->router.size() == 1);
  CHECK(logs->router[0].what == "submit");
  CHECK(logs->router[0].id == 20);
  CHECK(logs->router[0].prompt_ids == tok->encode(prompt, true));
  CHECK(logs->router[0].from == tokenizer.address());
  for (int32_t eos : tok->stop_ids())
    CHECK(std::find(logs->router[0].stop_ids.begin(), logs->router[0].stop_ids.end(), eos) !=
          logs->router[0].stop_ids.end());

  // Deltas as the scheduler sends them: text, the prompt's ids in the first; then the stop string. The continuation
  // is one encoding cut where its text reads "... went to", so that each piece decodes as it does in the whole.
  const std::vector<int32_t> story = tok->encode("Lily went to the park", false);
  size_t cut = 1;
  while (cut < story.size() && tok->decode({story.begin(), story.begin() + long(cut)}).find("went to") == std::string::npos)
    ++cut;
  REQUIRE(cut < story.size());
  const std::vector<int32_t> lily(story.begin(), story.begin() + long(cut)), park(story.begin() + long(cut), story.end());
  // The text the story adds after the prompt: " Lily went to the park" (its leading space kept).
  std::vector<int32_t> prompt_and_story = tok->encode(prompt, true);
  const std::string prompt_text = tok->decode(prompt_and_story);
  prompt_and_story.insert(prompt_and_story.end(), story.begin(), story.end());
  const std::string whole = tok->decode(prompt_and_story).substr(prompt_text.size());
  REQUIRE(whole == " " + tok->decode(story));
  const std::string before_stop = whole.substr(0, whole.find(" the"));
  caf::send_as(scheduler, tokenizer, delta_atom::value, deltas({{20, lily}}));
  sched.run();
  REQUIRE(logs->client.size() == 2);
  CHECK(logs->client[1][0].prompt_ids == tok->encode(prompt, true).size());
  CHECK(logs->client[1][0].finish == wire::FinishReason::NONE);
  caf::send_as(scheduler, tokenizer, delta_atom::value, deltas({{20, park}}));
  sched.run();
  REQUIRE(logs->client.size() == 3);
  // The text up to the stop string, and none of it or what follows it.
  CHECK(logs->client[1][0].text + logs->client[2][0].text == before_stop);
  CHECK(logs->client[2][0].finish == wire::FinishReason::STOP);
  CHECK(logs->client[2][0].prompt_ids == 0);
  REQUIRE(logs->router.size() == 2);
  CHECK(logs->router[1].what == "cancel");
  CHECK(logs->router[1].id == 20);
  // The scheduler's last word on the stopped sample goes nowhere.
  caf::send_as(scheduler, tokenizer, delta_atom::value, deltas({{20, {}, wire::FinishReason::CANCELLED}}));
  sched.run();
  CHECK(logs->client.size() == 3);

  // Two samples (ids 30, 31); one finishes, then the client cancels: one cancel, for the sample still running.
  caf::send_as(client, tokenizer, submit_atom::value, text_request(30, prompt, 2, {}));
  sched.run();
  REQUIRE(logs->router.size() == 3);
  caf::send_as(scheduler, tokenizer, delta_atom::value,
               deltas({{30, lily, wire::FinishReason::LENGTH}, {31, lily}}));
  sched.run();
  REQUIRE(logs->client.size() == 4);
  CHECK(logs->client[3].size() == 2);  // one batch for the client
  caf::send_as(client, tokenizer, cancel_atom::value, cancel(30));
  sched.run();
  REQUIRE(logs->router.size() == 4);
  CHECK(logs->router[3].what == "cancel");
  CHECK(logs->router[3].id == 31);

  // A request id still in use is refused; the request that holds it is untouched.
  caf::send_as(client, tokenizer, submit_atom::value, text_request(31, prompt, 1, {}));
  sched.run();
  REQUIRE(logs->client.size() == 5);
  CHECK(logs->client[4][0].finish == wire::FinishReason::ERROR);
  CHECK(logs->client[4][0].error.find("already in use") != std::string::npos);
  CHECK(logs->router.size() == 4);
  caf::send_as(scheduler, tokenizer, delta_atom::value, deltas({{31, park, wire::FinishReason::LENGTH}}));
  sched.run();
  REQUIRE(logs->client.size() == 6);
  CHECK(logs->client[3][1].text + logs->client[5][0].text == whole);

  for (caf::actor a : {client, scheduler, caf::actor_cast<caf::actor>(asker)})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(tokenizer, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  sched.run();
}
