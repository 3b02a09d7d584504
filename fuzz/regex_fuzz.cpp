// Regular expressions and the texts matched against them (structured/regex): a pattern, NUL, a text's bytes.
// Properties: compile() never crashes, ends within the fuzzer's timeout (its work is bounded), and refuses with a
// message that begins "regex: "; under a compiled pattern a refused byte leaves the matcher as it was, and every
// state the matcher reaches can still end a match (complete, or some byte continues it).
#include <string>

#include "fuzz_util.hpp"
#include "structured/regex.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_nul(data, size, 2);
  auto re = structured::Regex::compile(parts[0]);
  if (!re) {
    fuzz::require(re.error().message.rfind("regex: ", 0) == 0, "a refused pattern without a message");
    return 0;
  }
  const std::string text = parts.size() > 1 ? parts[1] : std::string();
  structured::RegexMatcher m(*re);
  fuzz::require(m.complete() || m.continues(), "the start state cannot end a match");
  for (const char c : text) {
    const int32_t before = m.state();
    if (m.feed(static_cast<uint8_t>(c))) {
      fuzz::require(m.complete() || m.continues(), "a state that cannot end a match was entered");
    } else {
      fuzz::require(m.state() == before, "a refused byte changed the matcher");
    }
  }
  return 0;
}
