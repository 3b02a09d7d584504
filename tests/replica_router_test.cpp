// The data parallel router's choices, scripted: round robin, least outstanding tokens, prefix affinity, replicas
// coming and going.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>

#include "scheduler/replica_router.hpp"

using namespace actord;

namespace {
std::vector<int32_t> prompt(int first, int len) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  std::iota(p.begin(), p.end(), first);
  return p;
}
}  // namespace

TEST_CASE("router - policies by name - an unknown one is refused with the choices", "[router]") {
  CHECK(*route_policy_from_name("least_tokens") == RoutePolicy::least_tokens);
  CHECK(*route_policy_from_name("round_robin") == RoutePolicy::round_robin);
  CHECK(*route_policy_from_name("prefix_affinity") == RoutePolicy::prefix_affinity);
  auto bad = route_policy_from_name("random");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("least_tokens") != std::string::npos);
}

TEST_CASE("router - nothing to route to without replicas", "[router]") {
  ReplicaRouter r(RoutePolicy::least_tokens, 16);
  CHECK_FALSE(r.route(prompt(0, 4), 8).has_value());
  r.add(3);
  CHECK(r.route(prompt(0, 4), 8) == 3u);
  r.remove(3);
  CHECK(r.empty());
  CHECK_FALSE(r.route(prompt(0, 4), 8).has_value());
}

TEST_CASE("router - round robin takes replicas in turn, skipping removed ones", "[router]") {
  ReplicaRouter r(RoutePolicy::round_robin, 16);
  r.add(0);
  r.add(1);
  r.add(2);
  std::vector<uint64_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(*r.route(prompt(0, 4), 8));
  CHECK(got == std::vector<uint64_t>{0, 1, 2, 0, 1, 2});
  r.remove(1);
  for (int i = 0; i < 4; ++i) CHECK(*r.route(prompt(0, 4), 8) != 1u);
}

TEST_CASE("router - least tokens books each request and follows the replicas' reports", "[router]") {
  ReplicaRouter r(RoutePolicy::least_tokens, 16);
  r.add(0);
  r.add(1);
  CHECK(*r.route(prompt(0, 100), 100) == 0u);  // tie: lowest id; books 200
  CHECK(r.load(0) == 200);
  CHECK(*r.route(prompt(0, 10), 10) == 1u);    // books 20
  CHECK(*r.route(prompt(0, 10), 10) == 1u);    // 40 < 200
  CHECK(*r.route(prompt(0, 10), 10, 4) == 1u); // n = 4: 10 + 40
  CHECK(r.load(1) == 90);
  r.report_load(0, 5);                         // replica 0 finished most of its work
  CHECK(*r.route(prompt(0, 10), 10) == 0u);
  r.add(2);                                    // a new replica starts empty and takes the next one
  CHECK(*r.route(prompt(0, 10), 10) == 2u);
}

TEST_CASE("router - prefix affinity keeps a shared prefix on one replica until it is overloaded", "[router]") {
  ReplicaRouter r(RoutePolicy::prefix_affinity, 4);
  r.add(0);
  r.add(1);
  const auto a = prompt(100, 12), b = prompt(500, 12);
  const uint64_t ra = *r.route(a, 4);
  const uint64_t rb = *r.route(b, 4);
  CHECK(ra != rb);                             // least tokens for unseen prefixes
  // Same 2 leading blocks, different tail: the replica that saw the prefix.
  auto a2 = prompt(100, 8);
  a2.push_back(7);
  a2.push_back(7);
  a2.push_back(7);
  a2.push_back(7);
  for (int i = 0; i < 3; ++i) CHECK(*r.route(a2, 4) == ra);
  CHECK(*r.route(b, 4) == rb);
  // Short prompts (under a block) have no affinity: least tokens.
  r.report_load(ra, 0);
  r.report_load(rb, 50);
  CHECK(*r.route(prompt(0, 3), 1) == ra);
  // Overloaded beyond both the relative slack and the absolute gap: the prefix goes to the least loaded.
  r.report_load(ra, 10 * ReplicaRouter::kAffinityMinGap);
  r.report_load(rb, 0);
  CHECK(*r.route(a, 4) == rb);
  // The prefix now follows rb.
  r.report_load(ra, 0);
  r.report_load(rb, 0);
  CHECK(*r.route(a, 4) == rb);
  // A removed replica's prefixes go elsewhere.
  r.remove(rb);
  CHECK(*r.route(a, 4) == ra);
}

TEST_CASE("router - warm-in: a replica added beside others takes an eighth of an equal share, and a full one after "
          "three load reports", "[router]") {
  for (RoutePolicy policy : {RoutePolicy::least_tokens, RoutePolicy::round_robin}) {
    INFO(route_policy_name(policy));
    ReplicaRouter r(policy, 16);
    r.add(0, /*warm_in=*/true);  // the first one has no one beside it: full weight
    CHECK(r.weight(0) == 1.0);
    r.add(1, /*warm_in=*/true);
    CHECK(r.weight(1) == ReplicaRouter::kWarmStart);
    std::map<uint64_t, int> got;
    for (int i = 0; i < 72; ++i) ++got[*r.route(prompt(0, 10), 10)];
    CHECK(got[1] * 8 == got[0]);  // 8 and 64
    for (int report = 0; report < 3; ++report) r.report_load(1, r.load(1));
    CHECK(r.weight(1) == 1.0);
    r.report_load(0, 0);
    r.report_load(1, 0);
    got.clear();
    for (int i = 0; i < 72; ++i) ++got[*r.route(prompt(0, 10), 10)];
    CHECK(got[0] == 36);
    CHECK(got[1] == 36);
  }
}

TEST_CASE("router - roles: prefill requests go to prefill replicas, decode continuations to decode ones, under "
          "every policy", "[router][disaggregation]") {
  using Phase = ReplicaRouter::Phase;
  CHECK(*replica_role_from_name("prefill") == ReplicaRole::prefill);
  CHECK(*replica_role_from_name("decode") == ReplicaRole::decode);
  CHECK(*replica_role_from_name("both") == ReplicaRole::both);
  auto bad = replica_role_from_name("producer");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("prefill") != std::string::npos);
  for (RoutePolicy policy : {RoutePolicy::round_robin, RoutePolicy::least_tokens, RoutePolicy::prefix_affinity}) {
    INFO(route_policy_name(policy));
    ReplicaRouter r(policy, 4);
    r.add(0, false, ReplicaRole::prefill);
    r.add(1, false, ReplicaRole::decode);
    r.add(2, false, ReplicaRole::decode);
    r.add(3, false, ReplicaRole::prefill);
    std::map<uint64_t, int> prefills, decodes;
    for (int i = 0; i < 40; ++i) {
      ++prefills[*r.route(prompt(100 * i, 16), 8, 1, Phase::prefill)];
      ++decodes[*r.route(prompt(100 * i, 17), 7, 1, Phase::decode)];
    }
    CHECK(prefills.size() == 2);
    CHECK(prefills.count(0) + prefills.count(3) == 2);
    CHECK(decodes.size() == 2);
    CHECK(decodes.count(1) + decodes.count(2) == 2);
  }
}

TEST_CASE("router - roles: a replica of role both serves either phase, and a phase with no replica of its role goes to "
          "the others", "[router][disaggregation]") {
  using Phase = ReplicaRouter::Phase;
  ReplicaRouter r(RoutePolicy::least_tokens, 16);
  r.add(0, false, ReplicaRole::prefill);
  // No replica decodes yet: a continuation goes to the prefill replica rather than waiting.
  CHECK(r.route(prompt(0, 8), 8, 1, Phase::decode) == 0u);
  r.add(5, false, ReplicaRole::both);
  r.report_load(0, 0);
  r.report_load(5, 0);
  CHECK(r.route(prompt(0, 8), 8, 1, Phase::decode) == 5u);  // the only one that decodes
  r.report_load(5, 1000);
  CHECK(r.route(prompt(0, 8), 8, 1, Phase::prefill) == 0u);  // least loaded of both prefill-capable ones
  // A prefill replica books the prompt and the first token only; the rest is a decode replica's.
  r.report_load(0, 0);
  REQUIRE(r.route(prompt(0, 8), 100, 1, Phase::prefill) == 0u);
  CHECK(r.load(0) == 9);
  r.remove(5);
  CHECK(r.route(prompt(0, 8), 8, 1, Phase::decode) == 0u);
}

TEST_CASE("router - roles: warm-in counts only peers of the same role", "[router][disaggregation]") {
  ReplicaRouter r(RoutePolicy::least_tokens, 16);
  r.add(0, true, ReplicaRole::prefill);
  r.add(1, true, ReplicaRole::decode);  // the first decode replica: nobody else decodes
  CHECK(r.weight(1) == 1.0);
  r.add(2, true, ReplicaRole::decode);
  CHECK(r.weight(2) == ReplicaRouter::kWarmStart);
}

TEST_CASE("router - each phase routes by its own policy, and set_policies changes them for the requests after",
          "[router][disaggregation]") {
  using Phase = ReplicaRouter::Phase;
  ReplicaRouter r(PhasePolicies{RoutePolicy::round_robin, RoutePolicy::least_tokens}, 16);
  r.add(0, false, ReplicaRole::prefill);
  r.add(1, false, ReplicaRole::prefill);
  r.add(2, false, ReplicaRole::decode);
  r.add(3, false, ReplicaRole::decode);
  // Prefill in turn, whatever the load: least_tokens would send the third to replica 1 (2 tokens against 101).
  CHECK(*r.route(prompt(0, 100), 8, 1, Phase::prefill) == 0u);
  CHECK(*r.route(prompt(0, 1), 8, 1, Phase::prefill) == 1u);
  CHECK(*r.route(prompt(0, 1), 8, 1, Phase::prefill) == 0u);
  // Decode by load: round_robin would send the third to replica 2.
  CHECK(*r.route(prompt(0, 100), 100, 1, Phase::decode) == 2u);
  CHECK(*r.route(prompt(0, 1), 1, 1, Phase::decode) == 3u);
  CHECK(*r.route(prompt(0, 1), 1, 1, Phase::decode) == 3u);

  r.set_policies({RoutePolicy::least_tokens, RoutePolicy::round_robin});
  CHECK(r.policies() == PhasePolicies{RoutePolicy::least_tokens, RoutePolicy::round_robin});
  CHECK(*r.route(prompt(0, 1), 8, 1, Phase::prefill) == 1u);  // 2 + 2 booked against 101 + 2
  CHECK(*r.route(prompt(0, 1), 8, 1, Phase::prefill) == 1u);
  std::map<uint64_t, int> decodes;
  for (int i = 0; i < 4; ++i) ++decodes[*r.route(prompt(0, 1), 1, 1, Phase::decode)];
  CHECK(decodes == std::map<uint64_t, int>{{2, 2}, {3, 2}});  // in turn, though replica 2 holds 200 tokens
}
