// WorkerCore's side of what a sequence's sampling needs from its tokens (actors/worker_core.hpp): the penalty
// history, and a response format's grammar (structured/), fed the tokens in position order and asked, for each
// sampled row, which ids it allows next.
#include <string>

#include "actors/worker_core.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {

Result<const structured::TokenVocabulary*> WorkerCore::token_vocabulary() {
  if (!token_vocabulary_) {
    auto tok = Tokenizer::load(model_dir_);
    if (!tok) return make_error(tok.error().code, "response_format: " + tok.error().message);
    token_vocabulary_ = structured::TokenVocabulary::from(*tok, model_->config().vocab_size);
  }
  return &*token_vocabulary_;
}

std::string WorkerCore::start_grammar(SequenceState& st) {
  st.json_next = st.prompt_len;
  if (st.sampling.response_format != ResponseFormat::json_schema) {
    st.json.emplace();
    return {};
  }
  auto known = schemas_.find(st.sampling.json_schema);
  if (known == schemas_.end()) {
    auto compiled = structured::JsonSchema::compile(st.sampling.json_schema);
    if (!compiled) return "response_format: json_schema: " + compiled.error().message;
    if (schemas_.size() >= kMaxSchemas) schemas_.clear();
    known = schemas_.emplace(st.sampling.json_schema, std::move(*compiled)).first;
  }
  st.schema = known->second;
  st.json.emplace(*st.schema);
  return {};
}

std::string WorkerCore::remember_token(uint64_t seq_id, SequenceState& st, uint32_t pos, int32_t id) {
  if (st.sampling.has_penalties()) st.remember(pos, id);
  if (!st.json || pos < st.json_next) return {};  // no grammar; the prompt's token, or fed already
  if (pos > st.json_next)
    return "sequence " + std::to_string(seq_id) + ": generated tokens before position " + std::to_string(pos) +
           " were never fed to its response format";
  auto vocab = token_vocabulary();
  if (!vocab) return vocab.error().message;
  ++st.json_next;
  if (id < 0 || id >= (*vocab)->size()) return {};
  // The sampler drew from the ids the grammar allowed: a byte it refuses (a stop id has none) changes nothing.
  for (const char b : (*vocab)->bytes[static_cast<size_t>(id)])
    if (!st.json->feed(static_cast<uint8_t>(b))) break;
  return {};
}

std::string WorkerCore::allow_next_tokens() {
  grammars_.clear();  // a forking row's sequence once
  for (size_t r = 0; r < sample_requests_.size(); ++r) {
    SequenceState* st = sample_states_[r];
    if (st->json && (r == 0 || sample_states_[r - 1] != st)) grammars_.push_back(st);
  }
  if (grammars_.empty()) return {};
  auto vocab = token_vocabulary();
  if (!vocab) return vocab.error().message;
  pool_->parallel_for(static_cast<int>(grammars_.size()), [&](int g) {
    SequenceState& st = *grammars_[static_cast<size_t>(g)];
    structured::allowed_tokens(*st.json, **vocab, st.stop_ids, st.allowed);
  });
  for (size_t r = 0; r < sample_requests_.size(); ++r)
    if (sample_states_[r]->json) sample_requests_[r].allowed = sample_states_[r]->allowed;
  return {};
}

}  // namespace actord
