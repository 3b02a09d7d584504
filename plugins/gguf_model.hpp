// A GGUF file as a Hugging Face model: its metadata as the config.json it was converted from, and each HF weight
// name's tensor in it, with the row order HF's layout has.
//
// Contract:
// - Architectures, as llama.cpp reads them: general.architecture "llama" (Llama, Mistral, TinyLlama:
//   LlamaForCausalLM; with expert_count, Mixtral: MixtralForCausalLM), "qwen2" (Qwen2ForCausalLM), "qwen3"
//   (Qwen3ForCausalLM), "qwen3moe" (Qwen3MoeForCausalLM: every layer sparse, expert_feed_forward_length, the kept
//   routing weights renormalised as llama.cpp does), "qwen2moe" (Qwen2MoeForCausalLM: the same with a shared expert,
//   expert_shared_feed_forward_length, routing weights kept as they are), "gemma3" (Gemma3ForCausalLM), "gemma2"
//   (Gemma2ForCausalLM) and
//   "phi3" (Phi3ForCausalLM: Phi-3, Phi-3.5-mini, Phi-4-mini).
//   - gemma: sliding windows (gemma2 absent: 4096; gemma3 absent: none) on every layer but each
//     attention.sliding_window_pattern-th (absent: gemma3 6, gemma2 2; a list of booleans marks each layer),
//     gemma3's rope.freq_base_swa (absent: 10000) on those layers, queries scaled by head_dim^-1/2 except in the 27Bs
//     (62 and 46 layers), hidden_size / heads there, the logit caps of attn_logit_softcapping and
//     final_logit_softcapping (gemma2 absent: 50 and 30).
//   - phi3: rope.dimension_count as partial_rotary_factor, rope_factors_long / rope_factors_short and
//     rope.scaling.attn_factor as LongRoPE, rope.scaling.original_context_length; its attention.sliding_window kept
//     as HF applies it (llama.cpp turns Phi's windows off).
//   - rope.scaling.type linear and yarn (factor, original_context_length, yarn_beta_fast / yarn_beta_slow,
//     yarn_log_multiplier as DeepSeek's mscale ratio, as llama.cpp applies them).
//   Others, other architectures' experts and Llama 3.1's rope_freqs tensor are Errc::unsupported naming what.
//   Missing keys are errors naming the file and the key.
// - Names: token_embd / output_norm / output, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
//   ffn_gate, ffn_up, ffn_down, attn_q_norm, attn_k_norm} (.weight, .bias) for model.embed_tokens / model.norm /
//   lm_head and model.layers.N.{input_layernorm, self_attn.*_proj, post_attention_layernorm, mlp.*_proj,
//   self_attn.q_norm / k_norm}; gemma2's and gemma3's post_attention_layernorm is post_attention_norm,
//   pre_feedforward_layernorm ffn_norm, post_feedforward_layernorm post_ffw_norm; phi3 has attn_qkv
//   (self_attn.qkv_proj) and ffn_up holding gate and up (mlp.gate_up_proj), and no separate parts; experts are
//   ffn_gate_inp (the router) and ffn_gate_exps / ffn_up_exps / ffn_down_exps, each expert's matrix stacked after
//   the last (3-D, [experts, rows, cols]), which WeightStore serves per expert (weight_store_fused.hpp); Qwen2-MoE's
//   shared expert is ffn_{gate,up,down}_shexp with its gate ffn_gate_inp_shexp.
// - llama.cpp's converter reorders the rows of a "llama" model's q and k projections for its interleaved RoPE; the
//   loader undoes it (qk_row_order) to get back HF's rotate-half rows. It stores gemma2's and gemma3's norm weights
//   as they multiply (1 + HF's weight); gguf_norm_shift() says what to take off to get HF's back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/gguf.hpp"
#include "core/status.hpp"

namespace actord {

Result<nlohmann::json> hf_config_from_gguf(const GgufFile& file);

// The GGUF tensor name of an HF weight name in a file of `architecture` (general.architecture); nullopt when it has
// none.
std::optional<std::string> gguf_tensor_name(const std::string& hf_name, const std::string& architecture = "llama");
std::optional<std::string> gguf_tensor_name(const GgufFile& file, const std::string& hf_name);

// What llama.cpp's converter added to an HF vector's values (1 for a gemma2 or gemma3 norm weight, else 0).
float gguf_norm_shift(const GgufFile& file, const std::string& hf_name);

// For a "llama" GGUF's q or k projection (`heads` heads of head_dim rows each): HF row r is GGUF row order[r].
// Empty when the tensor keeps its rows (not q/k, or another architecture).
std::vector<int64_t> qk_row_order(const GgufFile& file, const std::string& hf_name, int64_t rows);

}  // namespace actord
