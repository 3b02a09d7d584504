// JSON schemas and the documents matched against them (structured/json_schema, json_matcher): a schema's text, NUL,
// a document's bytes. Properties: compile() never crashes and refuses with a message; under a compiled schema the
// matcher takes or refuses every byte, a refused byte leaves it as it was (the next byte is judged the same as on a
// copy that never saw the refused one), no byte taken leaves it where no byte goes on and the document is not
// complete (patterns, formats and bounds included), and a document it calls complete is JSON that nlohmann parses as
// one object (one array where the schema's root is an array).
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.hpp"
#include "structured/json_matcher.hpp"
#include "structured/json_schema.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_nul(data, size, 2);
  auto schema = structured::JsonSchema::compile(parts[0]);
  if (!schema) {
    fuzz::require(!schema.error().message.empty(), "a refused schema without a message");
    return 0;
  }
  const std::string document = parts.size() > 1 ? parts[1] : std::string();
  structured::JsonMatcher m(**schema);
  std::string taken;
  for (const char c : document) {
    const structured::JsonMatcher before = m;
    if (m.feed(static_cast<uint8_t>(c))) {
      taken.push_back(c);
      bool goes_on = m.complete();
      for (int b = 0; b < 256 && !goes_on; ++b) {
        structured::JsonMatcher x = m;
        goes_on = x.feed(static_cast<uint8_t>(b));
      }
      fuzz::require(goes_on, "a byte taken led nowhere: " + taken);
      continue;
    }
    // Refused: the matcher is as it was, byte for byte in what it takes next.
    for (int b = 0; b < 256; ++b) {
      structured::JsonMatcher x = m, y = before;
      fuzz::require(x.feed(static_cast<uint8_t>(b)) == y.feed(static_cast<uint8_t>(b)),
                    "a refused byte changed the matcher");
    }
  }
  if (m.complete()) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(taken);
    } catch (const nlohmann::json::exception&) {
      fuzz::fail("a complete document that is not JSON: " + taken);
    }
    const bool array_root = (*schema)->node(structured::JsonSchema::kRoot).kind == structured::SchemaNode::Kind::array;
    fuzz::require(array_root ? parsed.is_array() : parsed.is_object(),
                  std::string("a complete document that is not ") + (array_root ? "an array: " : "an object: ") + taken);
  }
  return 0;
}
