#include "structured/token_mask.hpp"

#include <algorithm>

#include "tokenizer/tokenizer.hpp"

namespace actord::structured {

namespace {

// Whether `b` is text a string takes whole from between characters, and ends between characters.
bool plain_string_text(const std::string& b) {
  JsonMatcher m;
  for (char c : std::string("{\"")) m.feed(static_cast<uint8_t>(c));
  for (char c : b) {
    if (c == '"' || c == '\\' || !m.advance(static_cast<uint8_t>(c))) return false;
  }
  return m.plain_text_room() >= 0;
}

// The characters of UTF-8 text (its bytes less the continuation bytes).
int64_t characters(const std::string& b) {
  return std::count_if(b.begin(), b.end(), [](char c) { return !utf8_continuation(static_cast<uint8_t>(c)); });
}

// Whether the matcher takes all of `b` from its state.
bool takes(JsonMatcher m, const std::string& b) {
  for (char c : b)
    if (!m.advance(static_cast<uint8_t>(c))) return false;
  return true;
}

void set_bit(std::vector<uint64_t>& bits, int32_t id) { bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64); }

// The stop ids, where the text may end.
void allow_stops(std::vector<uint64_t>& bits, std::span<const int32_t> stop_ids, int vocab_size) {
  for (const int32_t id : stop_ids)
    if (id >= 0 && id < vocab_size) set_bit(bits, id);
}

// Depth first over the trie from `start`: a node's state is its parent's with the node's byte, `step(state, byte)`
// false where it is refused (and everything under it dropped); sets the ids of every node taken.
template <class State, class Step>
void walk_trie(const TokenVocabulary& vocab, const State& start, Step step, std::vector<uint64_t>& bits) {
  struct Visit {
    int32_t node;
    State state;  // the parent's
  };
  std::vector<Visit> stack;
  for (int32_t c = vocab.trie.empty() ? -1 : vocab.trie[0].first_child; c >= 0;
       c = vocab.trie[static_cast<size_t>(c)].next_sibling)
    stack.push_back({c, start});
  while (!stack.empty()) {
    Visit v = stack.back();
    stack.pop_back();
    const TokenVocabulary::Node& node = vocab.trie[static_cast<size_t>(v.node)];
    if (!step(v.state, node.byte)) continue;
    for (int32_t t = node.tokens_begin; t < node.tokens_end; ++t) set_bit(bits, vocab.node_tokens[static_cast<size_t>(t)]);
    for (int32_t c = node.first_child; c >= 0; c = vocab.trie[static_cast<size_t>(c)].next_sibling)
      stack.push_back({c, v.state});
  }
}

}  // namespace

TokenVocabulary TokenVocabulary::from(const Tokenizer& tok, int vocab_size) {
  TokenVocabulary v;
  v.bytes.resize(static_cast<size_t>(vocab_size));
  v.plain_string.assign((static_cast<size_t>(vocab_size) + 63) / 64, 0);
  v.plain_within.assign(kRoomSteps + 1, std::vector<uint64_t>(v.plain_string.size(), 0));
  std::vector<int32_t> with_bytes;
  for (int32_t id = 0; id < vocab_size; ++id) {
    std::string b = tok.token_bytes(id).value_or("");
    if (!b.empty()) {
      with_bytes.push_back(id);
      if (plain_string_text(b)) {
        const uint64_t bit = uint64_t{1} << (id % 64);
        v.plain_string[static_cast<size_t>(id) / 64] |= bit;
        const int64_t n = characters(b);
        for (int64_t k = n; k <= kRoomSteps; ++k)
          v.plain_within[static_cast<size_t>(k)][static_cast<size_t>(id) / 64] |= bit;
        if (n > kRoomSteps) v.longer_plain.emplace_back(id, n);
      } else {
        v.not_plain.push_back(id);
      }
      if (b.find('"') != std::string::npos) v.with_quote.push_back(id);
      v.max_token_chars = std::max(v.max_token_chars, static_cast<uint32_t>(characters(b)));
    }
    v.bytes[static_cast<size_t>(id)] = std::move(b);
  }
  // The trie, built from the bytes in sorted order: each token shares the path of its common prefix with the one
  // before it and adds nodes for the rest, appended as last children.
  std::stable_sort(with_bytes.begin(), with_bytes.end(),
                   [&](int32_t a, int32_t b) { return v.bytes[static_cast<size_t>(a)] < v.bytes[static_cast<size_t>(b)]; });
  v.trie.emplace_back();
  std::vector<int32_t> path{0}, last_child{-1};  // path[d]: the node of the current prefix of length d
  const std::string* previous = nullptr;
  std::vector<std::vector<int32_t>> ends;  // per node, the ids ending there
  ends.emplace_back();
  for (const int32_t id : with_bytes) {
    const std::string& b = v.bytes[static_cast<size_t>(id)];
    size_t common = 0;
    if (previous) {
      while (common < b.size() && common < previous->size() && b[common] == (*previous)[common]) ++common;
    }
    path.resize(common + 1);
    for (size_t d = common; d < b.size(); ++d) {
      const auto node = static_cast<int32_t>(v.trie.size());
      v.trie.push_back({-1, -1, 0, 0, static_cast<uint8_t>(b[d])});
      ends.emplace_back();
      last_child.push_back(-1);
      const int32_t parent = path[d];
      if (last_child[static_cast<size_t>(parent)] < 0) v.trie[static_cast<size_t>(parent)].first_child = node;
      else v.trie[static_cast<size_t>(last_child[static_cast<size_t>(parent)])].next_sibling = node;
      last_child[static_cast<size_t>(parent)] = node;
      path.push_back(node);
    }
    ends[static_cast<size_t>(path[b.size()])].push_back(id);
    previous = &b;
  }
  for (size_t n = 0; n < v.trie.size(); ++n) {
    v.trie[n].tokens_begin = static_cast<int32_t>(v.node_tokens.size());
    v.node_tokens.insert(v.node_tokens.end(), ends[n].begin(), ends[n].end());
    v.trie[n].tokens_end = static_cast<int32_t>(v.node_tokens.size());
  }
  return v;
}

void allowed_tokens(const JsonMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits) {
  auto set = [&](int32_t id) { set_bit(bits, id); };
  // In a string's text the plain tokens that fit go, and the others are tried.
  if (const int64_t room = matcher.plain_text_room(); room >= 0) {
    if (room == JsonMatcher::kUnbounded) {
      bits = vocab.plain_string;
    } else {
      bits = vocab.plain_within[static_cast<size_t>(std::min<int64_t>(room, TokenVocabulary::kRoomSteps))];
      for (const auto& [id, n] : vocab.longer_plain)
        if (n <= room) set(id);
    }
    for (const int32_t id : vocab.not_plain)
      if (takes(matcher, vocab.bytes[static_cast<size_t>(id)])) set(id);
    return;  // a string is never the end of the object: no stop id
  }
  bits.assign((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  walk_trie(vocab, matcher, [](JsonMatcher& m, uint8_t b) { return m.advance(b); }, bits);
  if (matcher.complete()) allow_stops(bits, stop_ids, vocab.size());
}

void allowed_tokens(const RegexMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits) {
  bits.assign((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  if (matcher.regex().max_chars() != UINT32_MAX) {  // the matcher counts characters
    walk_trie(vocab, matcher, [](RegexMatcher& m, uint8_t b) { return m.feed(b); }, bits);
  } else if (const Regex& re = matcher.regex(); re.continues(matcher.state())) {
    walk_trie(vocab, matcher.state(), [&](int32_t& state, uint8_t b) {
      state = re.next(state, b);
      return state != Regex::kDead;
    }, bits);
  }
  if (matcher.complete()) allow_stops(bits, stop_ids, vocab.size());
}

void allowed_tokens(const GrammarMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits) {
  bits.assign((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  // walk_trie's order, but the path's states kept by depth, each node's built in the buffers of the last node at its
  // depth (a grammar matcher's copy per node would allocate its stacks).
  std::vector<GrammarMatcher> states{matcher};
  std::vector<std::pair<int32_t, size_t>> stack;  // a node to visit, and the depth of its parent's state
  for (int32_t c = vocab.trie.empty() ? -1 : vocab.trie[0].first_child; c >= 0; c = vocab.trie[static_cast<size_t>(c)].next_sibling)
    stack.push_back({c, 0});
  while (!stack.empty()) {
    const auto [n, depth] = stack.back();
    stack.pop_back();
    // states[depth + 1] is this node's state (its buffers reused from the last node at that depth).
    if (states.size() < depth + 2) states.resize(depth + 2, matcher);
    const TokenVocabulary::Node& node = vocab.trie[static_cast<size_t>(n)];
    if (!states[depth].feed_into(node.byte, states[depth + 1])) continue;
    for (int32_t t = node.tokens_begin; t < node.tokens_end; ++t) set_bit(bits, vocab.node_tokens[static_cast<size_t>(t)]);
    if (node.first_child < 0) continue;
    for (int32_t c = node.first_child; c >= 0; c = vocab.trie[static_cast<size_t>(c)].next_sibling)
      stack.push_back({c, depth + 1});
  }
  if (matcher.complete()) allow_stops(bits, stop_ids, vocab.size());
}

void MaskCache::allowed(const OutputMatcher& matcher, std::span<const int32_t> stop_ids,
                        std::vector<uint64_t>& bits) const {
  std::string key;
  const JsonMatcher* json = matcher.json();
  if (const RegexMatcher* re = matcher.regex()) {
    const std::pair<int32_t, uint32_t> state{re->state(), re->room(vocab_->max_token_chars)};
    key.assign(reinterpret_cast<const char*>(&state), sizeof state);
  } else if (const GrammarMatcher* g = matcher.grammar()) {
    key = g->key();
  } else if (const int64_t text = json->pattern_text_key(vocab_->max_token_chars); text >= 0) {
    key.assign(reinterpret_cast<const char*>(&text), sizeof text);
  } else {
    return allowed_tokens(*json, *vocab_, stop_ids, bits);
  }
  cached(matcher, key, bits);
  if (json) {  // the tokens that may close the string, and go on after it
    for (const int32_t id : vocab_->with_quote)
      if (takes(*json, vocab_->bytes[static_cast<size_t>(id)])) set_bit(bits, id);
  }
  if (matcher.complete()) allow_stops(bits, stop_ids, vocab_->size());
}

void MaskCache::cached(const OutputMatcher& matcher, std::string& key, std::vector<uint64_t>& bits) const {
  bool found = false;
  {
    std::lock_guard lock(mu_);
    if (auto it = masks_.find(key); it != masks_.end()) {
      bits = it->second;
      found = true;
    }
  }
  if (!found) {
    if (const JsonMatcher* json = matcher.json()) {  // the tokens the string takes without closing
      bits.assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
      walk_trie(*vocab_, *json, [](JsonMatcher& m, uint8_t b) { return !(b == '"' && m.in_pattern_text()) && m.advance(b); },
                bits);
    } else {
      allowed_tokens(matcher, *vocab_, {}, bits);
    }
    const auto size = static_cast<int64_t>(bits.size() * sizeof(uint64_t) + key.size());
    std::lock_guard lock(mu_);
    if (!masks_.count(key)) {  // another thread may have cached it meanwhile
      if (budget_->left.fetch_sub(size) >= size) {
        masks_.emplace(std::move(key), bits);
        bytes_ += static_cast<size_t>(size);
      } else {
        budget_->left += size;  // not taken
      }
    }
  }
}

void allowed_tokens(const OutputMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits, const MaskCache* masks) {
  if (masks) return masks->allowed(matcher, stop_ids, bits);
  if (const JsonMatcher* json = matcher.json()) return allowed_tokens(*json, vocab, stop_ids, bits);
  if (const RegexMatcher* re = matcher.regex()) return allowed_tokens(*re, vocab, stop_ids, bits);
  allowed_tokens(*matcher.grammar(), vocab, stop_ids, bits);
}

}  // namespace actord::structured
