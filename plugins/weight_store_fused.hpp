// Weights that checkpoints store fused, served by WeightStore under each part's own HF name as rows of the fused
// tensor:
// - Phi-3's self_attn.qkv_proj (q, k, v rows one after another) and mlp.gate_up_proj (gate rows, then up rows);
// - a mixture of experts' matrices stacked expert after expert, as GGUF files keep them (ffn_gate_exps,
//   ffn_up_exps, ffn_down_exps): experts.E.w1 / w3 / w2 (Mixtral) and experts.E.gate_proj / up_proj / down_proj
//   (the Qwen MoEs) are rows of the stacked "experts.w1" ... "experts.down_proj" (names of this store's, which
//   plugins/gguf_model.hpp maps to GGUF's).
// Internal to plugins/.
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
  int64_t experts = 0, expert_ff = 0, hidden = 0;
  static FusedRows of(const ModelConfig& config);
};

// Where a part lives in its fused tensor: that tensor's name and row count, and the part's first row there.
struct FusedPart {
  std::string stored;
  int64_t stored_rows = 0;
  int64_t first_row = 0;
};

// The fused tensor that would hold weight (or bias) `name`: q_proj / k_proj / v_proj -> qkv_proj, gate_proj /
// up_proj -> gate_up_proj, an expert's matrix -> its stack; nullopt for any other name. Whether the checkpoint has it
// is the caller's question.
std::optional<FusedPart> fused_part(const std::string& name, const FusedRows& rows);

}  // namespace actord::store_detail
