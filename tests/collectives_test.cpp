// Collectives (comms/collectives/): every operation on 1 to 4 ranks for each CPU backend (in-process threads,
// shared memory between forked processes, ZeroMQ over tcp loopback and over ipc between forked processes) against
// a plain reference computed here; all_reduce and reduce_scatter bit-identical to the rank-order float sum on every
// rank; sizes that do not divide by the group size, zero-length operations; groups destroyed and rebuilt with
// another size. Failures and bad input: collectives_failure_test.cpp.
#include "collectives_harness.hpp"

TEST_CASE("collectives: the rank-order reference depends on the order, so bit equality with it means something",
          "[collectives]") {
  // Three ranks summed in another order differ from the rank-order sum somewhere (a + b == b + a always, so two
  // ranks cannot show it).
  const auto ref = rank_order_sum(3, 5000, 100);
  size_t differ = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float other = (value(2, i, 100) + value(1, i, 100)) + value(0, i, 100);
    if (std::memcmp(&other, &ref[i], 4) != 0) ++differ;
  }
  CHECK(differ > 100);
}

TEST_CASE("collectives: every operation on 1-4 in-process ranks equals its reference", "[collectives]") {
  exercise_fleet(kThreads);
}

TEST_CASE("collectives: every operation on 1-4 ranks in processes over shared memory equals its reference",
          "[collectives]") {
  exercise_fleet(kShm);
  CHECK(leftover_segments().empty());
}

TEST_CASE("collectives: every operation on 1-4 ranks in processes over zmq tcp equals its reference", "[collectives]") {
  exercise_fleet(kTcp);
}

TEST_CASE("collectives: every operation on 1-4 ranks in processes over zmq ipc equals its reference", "[collectives]") {
  exercise_fleet(kIpc);
}

TEST_CASE("collectives: a group is torn down and rebuilt with another size (4, then 2, then 3 ranks)",
          "[collectives]") {
  for (const Fleet& fleet : {kThreads, kShm, kTcp}) {
    test::TempDir dir;
    const std::vector<GroupSpec> specs = {test_spec(fleet, dir.path(), 21, 4), test_spec(fleet, dir.path(), 22, 2),
                                          test_spec(fleet, dir.path(), 23, 3)};
    auto reports = run_ranks(fleet, 4, [&](int rank, Opener& opener, Report& report, Shared&) {
      for (const GroupSpec& spec : specs) {
        if (rank >= spec.size) continue;
        auto comm = opener.open(spec, rank);
        if (!comm.ok()) return report.fail(spec.name, comm.error());
        std::vector<float> data = values(rank, 3001, static_cast<uint32_t>(spec.id));
        if (Status st = (*comm)->all_reduce(data); !st.ok()) return report.fail(spec.name, st.error());
        report.values[spec.name] = data;
      }  // each communicator is destroyed here: the group is torn down
    });
    INFO(fleet.label);
    for (int r = 0; r < 4; ++r) {
      const Report& rep = reports[static_cast<size_t>(r)];
      REQUIRE(rep.written);
      for (const std::string& e : rep.errors) FAIL_CHECK(e);
      for (const GroupSpec& spec : specs) {
        if (r >= spec.size) continue;
        INFO(spec.name << " rank " << r);
        REQUIRE(rep.values.count(spec.name) == 1);
        CHECK(first_difference(rep.values.at(spec.name),
                               rank_order_sum(spec.size, 3001, static_cast<uint32_t>(spec.id))) == -1);
      }
    }
  }
  CHECK(leftover_segments().empty());
}
