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
  st.grammar_next = st.prompt_len;
  const ResponseFormat format = st.sampling.response_format;
  const std::string* format_text = st.sampling.format_text();
  if (!format_text) {
    st.grammar.emplace(structured::JsonMatcher());  // json_object
    return {};
  }
  const std::string key = static_cast<char>(format) + *format_text;
  auto known = texts_.find(key);
  if (known == texts_.end()) {
    auto compiled = structured::compile_format(format, *format_text);
    if (!compiled) return structured::format_error(format, compiled.error().message);
    auto text = std::make_shared<CompiledText>();
    text->format = std::move(*compiled);
    auto vocab = token_vocabulary();
    if (!vocab) return vocab.error().message;
    text->masks = std::make_unique<structured::MaskCache>(**vocab, mask_budget_);
    if (texts_.size() >= kMaxTexts) texts_.clear();
    known = texts_.emplace(key, std::move(text)).first;
  }
  st.text = known->second;
  st.grammar.emplace(st.text->format.matcher());
  return {};
}

std::string WorkerCore::remember_token(uint64_t seq_id, SequenceState& st, uint32_t pos, int32_t id) {
  if (st.sampling.has_penalties()) st.remember(pos, id);
  if (!st.grammar || pos < st.grammar_next) return {};  // no grammar; the prompt's token, or fed already
  if (pos > st.grammar_next)
    return "sequence " + std::to_string(seq_id) + ": generated tokens before position " + std::to_string(pos) +
           " were never fed to its response format";
  auto vocab = token_vocabulary();
  if (!vocab) return vocab.error().message;
  ++st.grammar_next;
  if (id < 0 || id >= (*vocab)->size()) return {};
  // The sampler drew from the ids the grammar allowed: a byte it refuses (a stop id has none) changes nothing.
  for (const char b : (*vocab)->bytes[static_cast<size_t>(id)])
    if (!st.grammar->feed(static_cast<uint8_t>(b))) break;
  return {};
}

std::string WorkerCore::remember_slice(uint64_t seq_id, SequenceState& st, const SeqSlice& slice, uint32_t drafts) {
  // The previous slice's drafts that were kept: this slice starts right after the last of them.
  for (uint32_t pos = st.drafts_from;
       pos < static_cast<uint32_t>(slice.start_pos) && pos - st.drafts_from < st.drafts.size(); ++pos) {
    if (auto failed = remember_token(seq_id, st, pos, st.drafts[pos - st.drafts_from]); !failed.empty()) return failed;
  }
  st.drafts.clear();
  const int32_t fed = slice.num_tokens - static_cast<int32_t>(drafts);
  for (int32_t t = 0; t < fed; ++t) {
    const int32_t id = batch_.tokens[static_cast<size_t>(slice.first_token + t)];
    if (is_previous_pick(id)) continue;
    if (auto failed = remember_token(seq_id, st, static_cast<uint32_t>(slice.start_pos + t), id); !failed.empty())
      return failed;
  }
  if (drafts > 0) {
    const auto first = batch_.tokens.begin() + slice.first_token;
    st.drafts.assign(first + fed, first + slice.num_tokens);
    st.drafts_from = static_cast<uint32_t>(slice.start_pos + fed);
  }
  return {};
}

void WorkerCore::prepare_draft_rows() {
  draft_histories_.clear();
  draft_grammars_.clear();
  row_grammars_.clear();
  const structured::TokenVocabulary* vocab = nullptr;
  for (size_t r = 0; r < sample_requests_.size(); ++r) {
    SequenceState& st = *sample_states_[r];
    row_grammars_.push_back({st.grammar ? &*st.grammar : nullptr, st.text ? st.text->masks.get() : nullptr, &st.allowed,
                             &st.stop_ids});
    const auto [slice_index, row] = sample_rows_[r];
    if (row == 0 || (!st.sampling.has_penalties() && !st.grammar)) continue;
    // Row j follows the slice's token j, its j-th draft; a slice's rows come in order, so row j - 1's copies are
    // the last ones made.
    const SeqSlice& slice = batch_.seqs[slice_index];
    const int32_t draft = batch_.tokens[static_cast<size_t>(slice.first_token + static_cast<int32_t>(row))];
    if (st.sampling.has_penalties()) {
      PenaltyHistory& history = draft_histories_.emplace_back(row == 1 ? st.history : draft_histories_.back());
      history.add_output(draft);
      sample_requests_[r].history = &history;
    }
    if (st.grammar) {
      if (!vocab) {
        auto loaded = token_vocabulary();
        if (!loaded) continue;  // allow_next_tokens reports it
        vocab = *loaded;
      }
      DraftGrammar& g =
          draft_grammars_.emplace_back(DraftGrammar{row == 1 ? *st.grammar : draft_grammars_.back().grammar, {}});
      // A draft the grammar refuses was masked in the row before, whose sample therefore differs from it: this row
      // is dropped whatever it allows (the state stays where the refused byte left it).
      if (draft >= 0 && draft < vocab->size())
        for (const char b : vocab->bytes[static_cast<size_t>(draft)])
          if (!g.grammar.feed(static_cast<uint8_t>(b))) break;
      row_grammars_.back() = {&g.grammar, st.text ? st.text->masks.get() : nullptr, &g.allowed, &st.stop_ids};
    }
  }
}

std::string WorkerCore::allow_next_tokens() {
  grammars_.clear();  // each grammar once (a forking row's sequence's is its forks' too)
  for (size_t r = 0; r < row_grammars_.size(); ++r)
    if (row_grammars_[r].grammar && (r == 0 || !(row_grammars_[r - 1] == row_grammars_[r])))
      grammars_.push_back(row_grammars_[r]);
  if (grammars_.empty()) return {};
  auto vocab = token_vocabulary();
  if (!vocab) return vocab.error().message;
  pool_->parallel_for(static_cast<int>(grammars_.size()), [&](int g) {
    const RowGrammar& row = grammars_[static_cast<size_t>(g)];
    structured::allowed_tokens(*row.grammar, **vocab, *row.stop_ids, *row.allowed, row.masks);
  });
  for (size_t r = 0; r < sample_requests_.size(); ++r)
    if (row_grammars_[r].grammar) sample_requests_[r].allowed = *row_grammars_[r].allowed;
  return {};
}

}  // namespace actord
