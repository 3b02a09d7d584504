#include "tokenizer/text_stream.hpp"

namespace actord {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                       std::span<const int32_t> context)
    : detokenizer_(tokenizer, true, context), stops_(std::move(stop_strings)) {}

std::string TextStream::push(const std::vector<int32_t>& ids, bool final) {
  if (stops_.stopped()) return {};
  std::string text = detokenizer_.push(ids);
  if (final) text += detokenizer_.finish();
  if (stops_.empty()) return text;
  std::string out = stops_.push(text);
  if (final && !stops_.stopped()) out += stops_.finish();
  return out;
}

}  // namespace actord
