#include "tokenizer/bpe_model.hpp"

#include <cstdio>
#include <queue>

#include "tokenizer/utf8.hpp"

namespace actord::tok {

namespace {

std::string opt_string(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) return {};
  return j[key].get<std::string>();
}

bool opt_bool(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

}  // namespace

Result<BpeModel> BpeModel::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return make_error(Errc::parse_error, where + ": 'model' is missing or not an object");
  std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type.empty() && j.contains("merges")) type = "BPE";
  if (type != "BPE") {
    return make_error(Errc::unsupported, where + ": model type '" + type + "' is not supported");
  }
  BpeModel m;
  try {
    if (!j.contains("vocab") || !j["vocab"].is_object()) {
      return make_error(Errc::parse_error, where + ": BPE model has no 'vocab' object");
    }
    for (const auto& [tok, id_json] : j["vocab"].items()) {
      const auto token_id = token_id_of(id_json);
      if (!token_id) {
        return make_error(Errc::parse_error, where + ": bad id for token '" + tok + "' (ids are integers from 0 to " +
                                                 std::to_string(kMaxTokenId - 1) + ")");
      }
      const int64_t id = *token_id;
      m.vocab_[tok] = static_cast<int32_t>(id);
      if (static_cast<std::size_t>(id) >= m.id_to_token_.size()) {
        m.id_to_token_.resize(id + 1);
        m.has_id_.resize(id + 1, false);
      }
      m.id_to_token_[id] = tok;
      m.has_id_[id] = true;
    }
    m.prefix_ = opt_string(j, "continuing_subword_prefix");
    m.suffix_ = opt_string(j, "end_of_word_suffix");
    m.fuse_unk_ = opt_bool(j, "fuse_unk");
    m.byte_fallback_ = opt_bool(j, "byte_fallback");
    m.ignore_merges_ = opt_bool(j, "ignore_merges");
    const std::string unk = opt_string(j, "unk_token");
    if (!unk.empty()) {
      auto it = m.vocab_.find(unk);
      if (it == m.vocab_.end()) return make_error(Errc::parse_error, where + ": unk_token '" + unk + "' is not in the vocab");
      m.unk_id_ = it->second;
    }
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = m.vocab_.find(name);
      m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
    }
    if (j.contains("merges") && j["merges"].is_array()) {
      int32_t rank = 0;
      for (const auto& mj : j["merges"]) {
        std::string a, b;
        if (mj.is_string()) {
          const std::string s = mj.get<std::string>();
          const auto sp = s.find(' ');
          if (sp == std::string::npos) return make_error(Errc::parse_error, where + ": bad merge '" + s + "'");
          a = s.substr(0, sp);
          b = s.substr(sp + 1);
        } else if (mj.is_array() && mj.size() == 2) {
          a = mj[0].get<std::string>();
          b = mj[1].get<std::string>();
        } else {
          return make_error(Errc::parse_error, where + ": bad merge entry " + mj.dump());
        }
        auto ia = m.vocab_.find(a), ib = m.vocab_.find(b);
        if (ia == m.vocab_.end() || ib == m.vocab_.end()) {
          return make_error(Errc::parse_error, where + ": merge '" + a + " " + b + "' uses a token not in the vocab");
        }
        std::string merged = a;
        merged += std::string_view(b).substr(b.compare(0, m.prefix_.size(), m.prefix_) == 0 ? m.prefix_.size() : 0);
        auto in = m.vocab_.find(merged);
        if (in == m.vocab_.end()) {
          return make_error(Errc::parse_error, where + ": merge '" + a + " " + b + "' gives '" + merged + "', not in the vocab");
        }
        // A repeated pair keeps its last rank, as the HashMap collect in tokenizers does.
        m.merges_.insert_or_assign(pair_key(ia->second, ib->second), MergeInfo{rank, in->second});
        ++rank;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad BPE model: " + e.what());
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::MergeInfo* BpeModel::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<int32_t> ids;
  int32_t pending_unk = -1;  // unk not yet emitted, -1 when none (tokenizers' merge_word)
  std::string s;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = next_char_len(word, i);
    const bool first = i == 0, last = i + n == word.size();
    s.clear();
    if (!first) s += prefix_;
    s += word.substr(i, n);
    if (last) s += suffix_;
    i += n;
    if (auto it = vocab_.find(s); it != vocab_.end()) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : s) all = all && byte_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : s) ids.push_back(byte_ids_[c]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
  merge_all(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

// tokenizers' Word::merge_all: a heap of candidate merges ordered by (rank, position); stale entries skipped.
void BpeModel::merge_all(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2 || merges_.empty()) return;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  for (int i = 0; i + 1 < n; ++i) {
    if (const MergeInfo* mi = find_merge(ids[i], ids[i + 1])) queue.push({mi->rank, i, mi->new_id});
  }
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int right = next[top.pos];
    const MergeInfo* mi = find_merge(ids[top.pos], ids[right]);
    if (!mi || mi->new_id != top.new_id) continue;  // stale entry
    ids[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) {
      if (const MergeInfo* p = find_merge(ids[prev[top.pos]], ids[top.pos])) {
        queue.push({p->rank, prev[top.pos], p->new_id});
      }
    }
    if (next[top.pos] >= 0) {
      if (const MergeInfo* q = find_merge(ids[top.pos], ids[next[top.pos]])) queue.push({q->rank, top.pos, q->new_id});
    }
  }
  std::size_t w = 0;
  for (int i = 0; i < n; ++i) {
    if (alive[i]) ids[w++] = ids[i];
  }
  ids.resize(w);
}

}  // namespace actord::tok
