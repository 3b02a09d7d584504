// The GPT-2 byte <-> unicode mapping used by ByteLevel pre-tokenizers and decoders (internal header).
//
// Contract: every byte 0..255 maps to one printable stand-in character (bytes_to_unicode of GPT-2's encoder.py:
// '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map to themselves, the other 68 bytes to U+0100.. in order).
// `byte_level_encode` maps every byte of `s`; `byte_level_decode` maps a token back to its bytes, or returns
// false when the token holds a character outside the mapping (tokenizers then keeps the token's own bytes).
// Pure functions over constant tables.
#pragma once

#include <string>
#include <string_view>

namespace actord::tok {

std::string byte_level_encode(std::string_view s);
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace actord::tok
