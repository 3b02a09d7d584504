#include "tokenizer/unicode.hpp"

#include <cstdlib>

#include <utf8proc.h>

#include "tokenizer/utf8.hpp"

namespace actord::tok {

std::string normalize(std::string_view s, NormalForm form) {
  if (s.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    std::free(out);
    return std::string(s);
  }
  std::string r(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return r;
}

bool is_numeric(char32_t cp) {
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

std::string utf8_lossy(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 0;
    const char32_t c = decode_char(s, i, &n);
    if (c != 0xFFFD || s.substr(i, n) == kReplacementChar) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    // Maximal subpart of an ill-formed sequence (Unicode 3.9, as Rust's Utf8Chunks).
    const unsigned char lead = p[i];
    std::size_t width = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 1;
    std::size_t k = 1;
    if (width > 1 && i + 1 < s.size()) {
      const unsigned char b = p[i + 1];
      unsigned char lo = 0x80, hi = 0xBF;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
      if (b >= lo && b <= hi) {
        k = 2;
        while (k < width && i + k < s.size() && (p[i + k] & 0xC0) == 0x80) ++k;
      }
    }
    out.append(kReplacementChar);
    i += k;
  }
  return out;
}

}  // namespace actord::tok
