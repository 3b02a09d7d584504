// Which way each chunk of a step's queued launches runs (executors/graph_cache.hpp): the CUDA backend's graph
// bookkeeping, scripted step by step. Pure C++: runs everywhere.
#include <catch2/catch.hpp>
#include <cstdint>

#include "executors/graph_cache.hpp"

using namespace actord;
using exec::ChunkWay;

namespace {

uint64_t signature_of(int a, const void* p, int64_t b) {
  exec::Signature s;
  s.add(&a, sizeof a);
  s.add(&p, sizeof p);
  s.add(&b, sizeof b);
  return s.value();
}

}  // namespace

TEST_CASE("signature: equal values in order give equal signatures - order, values and sizes tell them apart",
          "[graph_cache]") {
  int x = 0, y = 0;
  CHECK(signature_of(1, &x, 7) == signature_of(1, &x, 7));
  CHECK(signature_of(1, &x, 7) != signature_of(1, &y, 7));  // another pointer
  CHECK(signature_of(1, &x, 7) != signature_of(1, &x, 8));
  CHECK(signature_of(2, &x, 7) != signature_of(1, &x, 7));
  exec::Signature a, b;
  const int32_t one32 = 1;
  const int64_t one64 = 1;
  a.add(&one32, sizeof one32);
  b.add(&one64, sizeof one64);
  CHECK(a.value() != b.value());  // the same number in another width
  exec::Signature ab, ba;
  const int32_t two = 2;
  ab.add(&one32, sizeof one32);
  ab.add(&two, sizeof two);
  ba.add(&two, sizeof two);
  ba.add(&one32, sizeof one32);
  CHECK(ab.value() != ba.value());
  ab.reset();
  CHECK(ab.value() == exec::Signature{}.value());
}

TEST_CASE("graph cache: one by one, captured the second time, then replayed - ungraphable chunks leave no trace",
          "[graph_cache]") {
  exec::GraphCache cache(8, 64);
  CHECK(cache.way(11, true) == ChunkWay::one_by_one);
  CHECK(cache.way(11, true) == ChunkWay::capture);
  CHECK(cache.keep(11) == std::nullopt);
  CHECK(cache.graphs() == 1);
  for (int step = 0; step < 3; ++step) CHECK(cache.way(11, true) == ChunkWay::replay);
  // Not graphable (a spoiled step, graphs off): one by one, even with a graph kept, and nothing remembered.
  CHECK(cache.way(11, false) == ChunkWay::one_by_one);
  CHECK(cache.way(12, false) == ChunkWay::one_by_one);
  CHECK(cache.way(12, true) == ChunkWay::one_by_one);  // first time seen
  CHECK(cache.way(12, true) == ChunkWay::capture);
  // A capture that failed (not kept): the signature is asked again as seen, so it tries again.
  CHECK(cache.way(12, true) == ChunkWay::capture);
}

TEST_CASE("graph cache: beyond max_graphs the least recently replayed graph goes - seen signatures are bounded",
          "[graph_cache]") {
  exec::GraphCache cache(2, 3);
  for (uint64_t s : {1, 2, 3}) {
    CHECK(cache.way(s, true) == ChunkWay::one_by_one);
    CHECK(cache.way(s, true) == ChunkWay::capture);
  }
  CHECK(cache.keep(1) == std::nullopt);
  CHECK(cache.keep(2) == std::nullopt);
  CHECK(cache.way(1, true) == ChunkWay::replay);  // 2 is now the least recently used
  CHECK(cache.keep(3) == std::optional<uint64_t>(2));
  CHECK(cache.graphs() == 2);
  CHECK(cache.way(2, true) == ChunkWay::one_by_one);  // dropped, and no longer seen
  CHECK(cache.way(1, true) == ChunkWay::replay);
  CHECK(cache.way(3, true) == ChunkWay::replay);
  // At most 3 seen signatures: a fourth forgets them all.
  exec::GraphCache small(2, 3);
  for (uint64_t s : {10, 11, 12}) CHECK(small.way(s, true) == ChunkWay::one_by_one);
  CHECK(small.way(13, true) == ChunkWay::one_by_one);  // 10 .. 12 forgotten
  CHECK(small.way(10, true) == ChunkWay::one_by_one);
  CHECK(small.way(13, true) == ChunkWay::capture);
}
