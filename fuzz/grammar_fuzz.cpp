// GBNF grammars and the texts matched against them (structured/grammar): a grammar, NUL, a text's bytes.
// Properties: compile() never crashes and refuses with a message that begins "grammar: "; under a compiled grammar a
// refused byte leaves the matcher as it was (its key()), and every state it enters can go on or end (it holds a
// stack, or the text is complete).
#include <string>

#include "fuzz_util.hpp"
#include "structured/grammar.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_nul(data, size, 2);
  auto g = structured::Grammar::compile(parts[0]);
  if (!g) {
    fuzz::require(g.error().message.rfind("grammar: ", 0) == 0, "a refused grammar without a message");
    return 0;
  }
  const std::string text = parts.size() > 1 ? parts[1] : std::string();
  structured::GrammarMatcher m(*g);
  fuzz::require(m.stacks() > 0, "a compiled grammar's matcher without a stack");
  for (const char c : text) {
    const std::string before = m.key();
    if (m.feed(static_cast<uint8_t>(c))) {
      fuzz::require(m.stacks() > 0, "a state with no stack was entered");
    } else {
      fuzz::require(m.key() == before, "a refused byte changed the matcher");
    }
  }
  return 0;
}
