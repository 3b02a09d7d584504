// A GGUF file as a Hugging Face model: its metadata as the config.json it was converted from, and each HF weight
// name's tensor in it, with the row order HF's layout has.
//
// Contract:
// - Architectures: general.architecture "llama" (Llama, Mistral, TinyLlama: LlamaForCausalLM) and "qwen2"
//   (Qwen2ForCausalLM); others, MoE GGUFs (expert_count > 0) and Llama 3.1's rope_freqs tensor are Errc::unsupported
//   naming what. Missing keys are errors naming the file and the key.
// - Names: token_embd / output_norm / output, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
//   ffn_gate, ffn_up, ffn_down} (.weight, .bias) for model.embed_tokens / model.norm / lm_head and
//   model.layers.N.{input_layernorm, self_attn.*_proj, post_attention_layernorm, mlp.*_proj}.
// - llama.cpp's converter reorders the rows of a "llama" model's q and k projections for its interleaved RoPE; the
//   loader undoes it (qk_row_order) to get back HF's rotate-half rows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/gguf.hpp"
#include "core/status.hpp"

namespace actord {

Result<nlohmann::json> hf_config_from_gguf(const GgufFile& file);

// The GGUF tensor name of an HF weight name; nullopt when it has none.
std::optional<std::string> gguf_tensor_name(const std::string& hf_name);

// For a "llama" GGUF's q or k projection (`heads` heads of head_dim rows each): HF row r is GGUF row order[r].
// Empty when the tensor keeps its rows (not q/k, or another architecture).
std::vector<int64_t> qk_row_order(const GgufFile& file, const std::string& hf_name, int64_t rows);

}  // namespace actord
