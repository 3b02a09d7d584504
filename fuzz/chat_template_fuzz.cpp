// Chat templates (tokenizer/chat_template: ChatTemplate::parse and render, the Jinja subset).
// Input: the template source, then NUL, then the render context as JSON (messages, add_generation_prompt, ...;
// when it is not a JSON object a two-message conversation is used).
// Properties: parse and render never throw or crash; every error is a value (parse errors with a message).
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.hpp"
#include "tokenizer/chat_template.hpp"

using namespace actord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = fuzz::split_nul(data, size, 2);
  auto tmpl = ChatTemplate::parse(parts[0]);
  if (!tmpl) {
    fuzz::require(!tmpl.error().message.empty(), "an empty parse error");
    return 0;
  }
  nlohmann::ordered_json context = parts.size() > 1 ? nlohmann::ordered_json::parse(parts[1], nullptr, false)
                                                    : nlohmann::ordered_json();
  if (!context.is_object()) {
    context = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi!"}}}},
               {"add_generation_prompt", true},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"}};
  }
  // A render error may have an empty message: raise_exception('') reports exactly ''.
  (void)tmpl->render(context);
  return 0;
}
