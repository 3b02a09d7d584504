// Weights that checkpoints store fused: Phi-3's self_attn.qkv_proj (q, k, v rows one after another) and
// mlp.gate_up_proj (gate rows, then up rows). WeightStore serves each part under its own HF name as rows of the
// fused tensor. Internal to plugins/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace actord {
struct ModelConfig;
}

namespace actord::store_detail {

// The row counts of the parts (the whole model's, unsharded).
struct FusedRows {
  int64_t q = 0, kv = 0, ff = 0;
  static FusedRows of(const ModelConfig& config);
};

// Where a part lives in its fused tensor: that tensor's name and row count, and the part's first row there.
struct FusedPart {
  std::string stored;
  int64_t stored_rows = 0;
  int64_t first_row = 0;
};

// The fused tensor that would hold weight (or bias) `name`: q_proj / k_proj / v_proj -> qkv_proj, gate_proj /
// up_proj -> gate_up_proj; nullopt for any other name. Whether the checkpoint has it is the caller's question.
std::optional<FusedPart> fused_part(const std::string& name, const FusedRows& rows);

}  // namespace actord::store_detail
