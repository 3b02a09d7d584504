// actord::Tokenizer: HF `tokenizer.json` BPE tokenizers: SentencePiece-style (Llama 2, Mistral, TinyLlama, ...)
// and byte-level (GPT-2, Llama 3, Qwen2/3, ...).
//
// Contract:
// - `load` reads <model_dir>/tokenizer.json, plus tokenizer_config.json and generation_config.json when present.
//   It never throws and never aborts: a missing file is Errc::not_found naming the path, malformed JSON is
//   Errc::parse_error naming the file, and an unknown normalizer / pre_tokenizer / model / decoder /
//   post_processor type is Errc::unsupported naming the type and the file.
// - Supported: added_tokens; normalizers Sequence, Prepend, Replace (String or Regex), Lowercase, Strip, NFC,
//   NFD, NFKC, NFKD; pre_tokenizers null, Metaspace, ByteLevel, Split (String or Regex), Digits, Sequence; model
//   BPE (byte_fallback, unk/fuse_unk, ignore_merges, subword prefix/suffix); post_processor TemplateProcessing
//   (single template), ByteLevel (no effect on ids), Sequence of those, or null (then tokenizer_config
//   add_bos_token / add_eos_token apply); decoders Sequence, Replace (String or Regex), ByteFallback, Fuse,
//   Strip, Metaspace, ByteLevel. Regexes run on PCRE2 (Unicode mode), normalization forms on utf8proc.
//   Not supported (load fails with Errc::unsupported): other pre-tokenizers (Whitespace, Punctuation, ...),
//   Precompiled / Bert normalizers, Unigram / WordPiece / WordLevel models, other post-processors.
// - encode takes UTF-8; when the pipeline uses regexes or normalization forms, invalid bytes are first replaced
//   by U+FFFD (String::from_utf8_lossy), since tokenizers itself only accepts valid strings.
// - encode/decode follow the HF `tokenizers` library: text is first split on added tokens (which map straight to
//   their ids, special or not), each remaining piece is normalized, pre-tokenized and BPE-encoded; the
//   post-processor runs only when add_special_tokens. decode maps ids to tokens (unknown ids dropped, special
//   tokens dropped when skip_special_tokens) and runs the decoder; bytes that are not valid UTF-8 come out as
//   U+FFFD.
// - A Tokenizer is immutable after load: copies share the loaded tables, and all const methods are safe to call
//   from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace actord {

class Tokenizer {
 public:
  static Result<Tokenizer> load(const std::filesystem::path& model_dir);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  // One past the largest token id (model vocab and added tokens): the size of the logits row.
  int32_t vocab_size() const;
  // tokenizer_config.json bos_token (else generation_config.json bos_token_id), when it names a known token.
  std::optional<int32_t> bos_id() const;
  // tokenizer_config.json eos_token, when it names a known token.
  std::optional<int32_t> eos_id() const;
  // Stop ids: generation_config.json eos_token_id (int or list) when present, else the eos token of
  // tokenizer_config.json; empty when neither names one.
  const std::vector<int32_t>& stop_ids() const;

  std::optional<int32_t> token_to_id(std::string_view token) const;  // added tokens first, then the model vocab
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;  // an added token marked special
  // True when `id` decodes through ByteFallback as one raw byte (a `<0xXX>` token); such tokens may combine
  // with their neighbours into one character.
  bool is_byte_token(int32_t id) const;
  // The bytes token `id` adds in the middle of a text (" there" for "▁there", one raw byte for "<0xE2>"): what a
  // grammar over the text's bytes sees. nullopt for special tokens and ids without a token.
  std::optional<std::string> token_bytes(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace actord
