#include "structured/code_points.hpp"

#include <algorithm>
#include <cctype>

namespace actord::structured {

CodeSet normalized(CodeSet s) {
  CodeSet cut;
  for (const CodeRange& r : s) {
    if (r.lo <= 0xDFFF && r.hi >= 0xD800) {
      if (r.lo < 0xD800) cut.push_back({r.lo, 0xD7FF});
      if (r.hi > 0xDFFF) cut.push_back({0xE000, r.hi});
    } else {
      cut.push_back(r);
    }
  }
  std::sort(cut.begin(), cut.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  CodeSet out;
  for (const CodeRange& r : cut) {
    if (!out.empty() && r.lo <= out.back().hi + 1) out.back().hi = std::max(out.back().hi, r.hi);
    else out.push_back(r);
  }
  return out;
}

CodeSet complement(const CodeSet& s) {
  CodeSet out;
  uint32_t next = 0;
  for (const CodeRange& r : normalized(s)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalized(std::move(out));
}

bool contains(const CodeSet& s, uint32_t cp) { return intersects(s, cp, cp); }

bool intersects(const CodeSet& s, uint32_t lo, uint32_t hi) {
  auto it = std::upper_bound(s.begin(), s.end(), hi, [](uint32_t c, const CodeRange& r) { return c < r.lo; });
  return it != s.begin() && std::prev(it)->hi >= lo;
}

std::optional<std::pair<uint32_t, int>> utf8_at(std::string_view text, size_t i) {
  if (i >= text.size()) return std::nullopt;
  const auto b0 = static_cast<uint8_t>(text[i]);
  const int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + static_cast<size_t>(len) > text.size()) return std::nullopt;
  uint32_t cp = len == 1 ? b0 : b0 & (0x7Fu >> len);
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(text[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = cp << 6 | (b & 0x3Fu);
  }
  static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kLeast[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  return std::pair{cp, len};
}

std::optional<uint32_t> hex_at(std::string_view text, size_t i, int digits) {
  uint32_t v = 0;
  for (int k = 0; k < digits; ++k, ++i) {
    if (i >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
    const char c = text[i];
    v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return std::nullopt;
  return v;
}

}  // namespace actord::structured
