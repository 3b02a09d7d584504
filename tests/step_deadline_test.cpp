// The step deadline as pure arithmetic: what it learns from results and the wait it gives a step.
#include <catch2/catch.hpp>

#include "scheduler/step_deadline.hpp"

using namespace actord;
using std::chrono::milliseconds;

TEST_CASE("no deadline until a step of the kind was seen", "[deadline]") {
  StepDeadline d(milliseconds(2000));
  CHECK_FALSE(d.expected_us(100, 0));
  CHECK_FALSE(d.expected_us(0, 8));
  CHECK(d.expected_us(0, 0) == 0u);  // block copies only
  CHECK_FALSE(d.deadline(0, d.expected_us(0, 8)));
  d.observe(0, 8, 4000);  // a decode step of 4 ms
  CHECK(d.expected_us(0, 8) == 4000u);
  CHECK_FALSE(d.expected_us(100, 0));  // prefill still unknown
  CHECK(d.deadline(0, d.expected_us(0, 8)) == milliseconds(2008));
  CHECK_FALSE(d.deadline(std::nullopt, d.expected_us(0, 8)));  // something unknown queued ahead
}

TEST_CASE("prefill is learned per prompt token and steps queued ahead count", "[deadline]") {
  StepDeadline d(milliseconds(500));
  d.observe(200, 0, 100000);  // 0.5 ms per prompt token
  CHECK(d.expected_us(1000, 0) == 500000u);
  d.observe(0, 4, 3000);
  // 2 x (3 ms ahead + 500 ms own) + 500 ms
  CHECK(d.deadline(3000, d.expected_us(1000, 4)) == milliseconds(1506));
}

TEST_CASE("a slower worker is followed at once, a faster one gradually", "[deadline]") {
  StepDeadline d(milliseconds(100));
  d.observe(0, 1, 1000);
  d.observe(0, 1, 5000);
  CHECK(d.expected_us(0, 1) == 5000u);
  d.observe(0, 1, 1000);
  CHECK(d.expected_us(0, 1) == 4200u);  // 0.8 x 5000 + 0.2 x 1000
}
