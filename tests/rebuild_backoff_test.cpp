// The coordinator's wait between attempts to rebuild a lost replica (actors/rebuild_backoff.hpp): three quick
// attempts, then a doubling wait up to engine.rebuild_retry_max, never given up.
#include <catch2/catch.hpp>

#include "actors/rebuild_backoff.hpp"

using namespace actord;
using std::chrono::milliseconds;

TEST_CASE("rebuild backoff: three attempts a second apart, then the wait doubles up to the cap and stays there",
          "[failure][plan]") {
  const milliseconds cap{30000};
  CHECK(rebuild_delay(1, cap) == milliseconds(1000));
  CHECK(rebuild_delay(3, cap) == milliseconds(1000));
  CHECK_FALSE(rebuilds_exhausted(2));
  CHECK(rebuilds_exhausted(3));
  CHECK(rebuild_delay(4, cap) == milliseconds(2000));
  CHECK(rebuild_delay(5, cap) == milliseconds(4000));
  CHECK(rebuild_delay(7, cap) == milliseconds(16000));
  CHECK(rebuild_delay(8, cap) == cap);
  CHECK(rebuild_delay(1000, cap) == cap);  // no overflow however long the node stays down
  // A cap under a second shortens the quick attempts too.
  CHECK(rebuild_delay(1, milliseconds(200)) == milliseconds(200));
  CHECK(rebuild_delay(9, milliseconds(200)) == milliseconds(200));
}
