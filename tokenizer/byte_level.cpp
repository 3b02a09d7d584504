#include "tokenizer/byte_level.hpp"

#include <array>

#include "tokenizer/utf8.hpp"

namespace actord::tok {

namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  std::array<int, 324> from_char{};  // code point -> byte, -1 when not a stand-in (all stand-ins are < 324)
  Tables() {
    from_char.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = keep ? char32_t(b) : char32_t(256 + n++);
      append_utf8(to_utf8[b], to_char[b]);
      from_char[to_char[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string byte_level_encode(std::string_view s) {
  const Tables& t = tables();
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) out += t.to_utf8[c];
  return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const Tables& t = tables();
  const std::size_t mark = out.size();
  for (std::size_t i = 0; i < token.size();) {
    std::size_t n = 0;
    const char32_t c = decode_char(token, i, &n);
    if (c >= t.from_char.size() || t.from_char[c] < 0 || (c == 0xFFFD && n == 1)) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(t.from_char[c]));
    i += n;
  }
  return true;
}

}  // namespace actord::tok
