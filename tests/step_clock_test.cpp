// The scheduler's wall-clock book-keeping as pure arithmetic (scheduler/step_clock.hpp): scripted timelines of
// steps in flight, answered on time and answered late (a worker that runs ahead).
#include <catch2/catch.hpp>

#include "scheduler/step_clock.hpp"

using namespace actord;
using std::chrono::microseconds;

namespace {
const StepClock::time_point t0{};
StepClock::time_point at(int64_t us) { return t0 + microseconds(us); }
}  // namespace

TEST_CASE("steps in flight are booked without overlap", "[step_clock]") {
  StepClock clock;
  // Step 1 sent at 0, step 2 sent at 100 (before 1's result), results at 1000 and 1900.
  CHECK(clock.book(at(0), at(1000), 0) == 1000u);
  CHECK(clock.book(at(100), at(1900), 0) == 900u);
  // An idle gap: step 3 sent at 2500, answered at 3000: booked from its sending.
  CHECK(clock.book(at(2500), at(3000), 0) == 500u);
  CHECK(clock.last_end() == at(3000));
}

TEST_CASE("a step answered late is booked to when it was done", "[step_clock]") {
  // A worker running ahead: a prefill step P (done at 5000) is answered only after the decode step D behind it was
  // queued and done (7000); D's own result comes at 9000, held 1000 after D was done at 8000.
  StepClock clock;
  const uint64_t prefill = clock.book(at(0), at(7000), 2000);
  const uint64_t decode = clock.book(at(100), at(9000), 1000);
  CHECK(prefill == 5000u);
  CHECK(decode == 3000u);  // 5000 .. 8000
  // Without the lateness, the prefill would have taken the decode step's time.
  StepClock naive;
  CHECK(naive.book(at(0), at(7000), 0) == 7000u);
  CHECK(naive.book(at(100), at(9000), 0) == 2000u);
}

TEST_CASE("lateness never books a step before it was sent or before the one before it ended", "[step_clock]") {
  StepClock clock;
  CHECK(clock.book(at(0), at(1000), 0) == 1000u);
  CHECK(clock.book(at(500), at(1200), 5000) == 0u);  // claims it was done before the previous step ended
  CHECK(clock.last_end() == at(1000));
  CHECK(clock.book(at(2000), at(2100), UINT64_MAX) == 0u);  // a malformed lateness
  CHECK(clock.last_end() == at(2000));
  CHECK(clock.book(at(2050), at(2600), 100) == 450u);  // 2050 .. 2500
}
