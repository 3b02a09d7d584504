// Unicode helpers backed by utf8proc (internal header).
//
// Contract: pure functions, thread-safe. `normalize` applies NFC / NFD / NFKC / NFKD to valid UTF-8 (invalid
// input is returned unchanged). `is_numeric` is Rust's char::is_numeric (general category Nd, Nl or No).
// `utf8_lossy` is Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
#pragma once

#include <string>
#include <string_view>

namespace actord::tok {

enum class NormalForm { nfc, nfd, nfkc, nfkd };

std::string normalize(std::string_view s, NormalForm form);
bool is_numeric(char32_t cp);
std::string utf8_lossy(std::string_view s);

}  // namespace actord::tok
