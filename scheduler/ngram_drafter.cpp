#include "scheduler/ngram_drafter.hpp"

#include <algorithm>

namespace actord {

NgramDrafter::NgramDrafter(int min_n, int max_n)
    : min_n_(std::max(1, min_n)), max_n_(std::max(std::max(1, min_n), max_n)) {}

uint64_t NgramDrafter::hash(std::span<const int32_t> gram) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ gram.size();
  for (int32_t id : gram) {
    h ^= static_cast<uint32_t>(id);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h | 1;  // never 0 (the empty slot)
}

void NgramDrafter::Index::put(uint64_t key, uint32_t value) {
  if (2 * (used_ + 1) > slots_.size()) {  // grow to keep at most half full
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(64, 2 * old.size()), Slot{});
    used_ = 0;
    for (const Slot& s : old)
      if (s.key) put(s.key, s.value);
  }
  const size_t mask = slots_.size() - 1;
  for (size_t i = (key >> 1) & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.value = value;
      return;
    }
    if (s.key == 0) {
      s = Slot{key, value};
      ++used_;
      return;
    }
  }
}

const uint32_t* NgramDrafter::Index::find(uint64_t key) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = (key >> 1) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s.value;
    if (s.key == 0) return nullptr;
  }
}

void NgramDrafter::index_until(std::span<const int32_t> tokens, size_t end) {
  for (size_t i = std::max<size_t>(indexed_, static_cast<size_t>(min_n_)); i < end; ++i) {
    for (int n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= i; ++n) {
      const auto gram = tokens.subspan(i - static_cast<size_t>(n), static_cast<size_t>(n));
      latest_.put(hash(gram), static_cast<uint32_t>(i));
    }
  }
  indexed_ = std::max(indexed_, end);
}

void NgramDrafter::propose(std::span<const int32_t> tokens, int max_drafts, std::vector<int32_t>& out) {
  out.clear();
  const size_t len = tokens.size();
  if (max_drafts <= 0 || len < static_cast<size_t>(min_n_) + 1) return;
  // Every occurrence that is followed by a known token: n-grams ending before the last position.
  index_until(tokens, len);
  for (int n = std::min<int>(max_n_, static_cast<int>(len) - 1); n >= min_n_; --n) {
    const auto suffix = tokens.subspan(len - static_cast<size_t>(n), static_cast<size_t>(n));
    const uint32_t* hit = latest_.find(hash(suffix));
    if (!hit) continue;
    const size_t next = *hit;  // the token after the earlier occurrence
    if (next < static_cast<size_t>(n) || next >= len) continue;
    const auto earlier = tokens.subspan(next - static_cast<size_t>(n), static_cast<size_t>(n));
    if (!std::equal(suffix.begin(), suffix.end(), earlier.begin())) continue;
    const size_t period = len - next;
    for (int j = 0; j < max_drafts; ++j) {
      const size_t at = next + static_cast<size_t>(j);
      out.push_back(at < len ? tokens[at] : out[static_cast<size_t>(j) - period]);
    }
    return;
  }
}

}  // namespace actord
