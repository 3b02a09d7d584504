// One row's greedy pick over some of the vocabulary: its highest logit and the lowest id holding it (NaN ignored, as
// the greedy sampler does). A tensor parallel rank computes it over its vocabulary shard (Backend::row_bests) and the
// ranks exchange these 8 bytes a row instead of their logits; sampler.hpp's merge_row_bests picks the whole row's.
#pragma once

#include <cstdint>

namespace actord {

struct RowBest {
  float logit = 0.0f;  // -inf when the ids held have no logit above -inf (or only NaN)
  int32_t id = 0;
};

}  // namespace actord
