// The tokenizer of a GGUF file (its tokenizer.ggml.* metadata) as the three Hugging Face documents a Tokenizer is
// built from — tokenizer.json, tokenizer_config.json, generation_config.json — so that a GGUF model tokenizes
// exactly as its HF original does, through the same pipeline.
//
// Contract:
// - tokenizer.ggml.model "llama" (SentencePiece BPE, Llama 2 / Mistral / TinyLlama): the document HF's converter
//   makes of the SentencePiece model: BPE with byte fallback, merges derived from the pieces' scores as HF's
//   SentencePieceExtractor derives them (every split of a piece into two pieces, ordered by the piece's score, then
//   by the ids of its halves), "▁" for spaces with a prefix when tokenizer.ggml.add_space_prefix (default true).
// - "gpt2" (byte-level BPE) with tokenizer.ggml.pre "llama-bpe" (Llama 3), "qwen2", "gpt-2" or "default": the
//   pre-tokenizer regex of that family, tokenizer.ggml.merges, ByteLevel decoding.
// - Tokens of type control (3) and unknown (2) become special added tokens, user-defined (4) added tokens that are
//   not special. BOS / EOS / EOT ids, add_bos_token / add_eos_token and tokenizer.chat_template go to the config
//   documents. Anything else is Errc::unsupported naming the key and value.
#pragma once

#include <nlohmann/json.hpp>

#include "core/gguf.hpp"
#include "core/status.hpp"

namespace actord {

struct TokenizerDocuments {
  nlohmann::json tokenizer;   // tokenizer.json
  nlohmann::json config;      // tokenizer_config.json (object)
  nlohmann::json generation;  // generation_config.json (object, or null)
};

Result<TokenizerDocuments> tokenizer_documents_from_gguf(const GgufFile& file);
// Only tokenizer_config.json and generation_config.json (tokenizer left null): the chat template and the special
// tokens, without building the vocabulary and merges.
Result<TokenizerDocuments> tokenizer_config_from_gguf(const GgufFile& file);

}  // namespace actord
