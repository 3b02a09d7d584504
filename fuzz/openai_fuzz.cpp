// The HTTP request bodies of the API (api/openai_protocol: parse_request), completions and chat, against the
// stories260K tokenizer (vocabulary 512) and the ChatML tool-calling template of tests/fixtures.
// Input: a request body; each input is parsed as a completions body and as a chat body (tool_choice auto reading
// hermes calls), and read as a model's text by the ToolCallReader of each tool-call format and the ReasoningReader,
// whole and in pieces.
// Properties: parse_request never throws or crashes; a refusal is a 400 with a message; an accepted request has
// valid sampling options, max_tokens in [1, 2^24], at least one prompt and token ids inside the vocabulary; a
// constrained tool_choice comes with a json_schema that compiles. The readers never throw; what they give as content
// is the text less what they read as calls (never more of it), and the same whole as in pieces; so is what the
// ReasoningReader splits off as reasoning.
#include <string>

#include "api/openai_protocol.hpp"
#include "api/openai_reasoning.hpp"
#include "api/openai_tools.hpp"
#include "structured/grammar.hpp"
#include "structured/json_schema.hpp"
#include "structured/regex.hpp"
#include "fuzz_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

namespace {

struct Context {
  Tokenizer tokenizer;
  ChatTemplate chat_template;
  nlohmann::json special_tokens;
  ParseContext parse;

  static Context& get() {
    static Context* c = [] {
      auto tok = Tokenizer::load(fuzz::source_dir() / "models/stories260K");
      nlohmann::json special;
      auto tmpl = load_chat_template(fuzz::source_dir() / "tests/fixtures/chat_templates/chatml_tools", &special);
      if (!tok || !tmpl) fuzz::fail("cannot load the stories260K tokenizer or the chatml_tools template");
      auto* ctx = new Context{std::move(*tok), std::move(*tmpl), std::move(special), {}};
      ctx->parse = ParseContext{ctx->tokenizer.vocab_size(), &ctx->tokenizer, &ctx->chat_template, &ctx->special_tokens};
      ctx->parse.tool_format = ToolCallFormat::hermes;
      return ctx;
    }();
    return *c;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Context& ctx = Context::get();
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {false, true}) {
    auto parsed = parse_request(body, chat, ctx.parse);
    if (const auto* error = std::get_if<ApiError>(&parsed)) {
      fuzz::require(error->status == 400 && !error->message.empty(), "a refusal that is not a 400 with a message");
      (void)error_body(*error);
      continue;
    }
    const ApiRequest& request = std::get<ApiRequest>(parsed);
    fuzz::require(!request.prompts.empty(), "an accepted request without prompts");
    for (const GenerateRequest& r : request.prompts) {
      fuzz::require(r.max_tokens >= 1 && r.max_tokens <= (1u << 24), "max_tokens out of range accepted");
      fuzz::require(r.sampling.validate(ctx.parse.vocab_size).ok(), "invalid sampling options accepted");
      for (int32_t id : r.prompt_ids)
        fuzz::require(id >= 0 && id < ctx.parse.vocab_size, "token id " + std::to_string(id) + " accepted");
      fuzz::require(r.prompt.has_value() || !r.prompt_ids.empty(), "an empty prompt accepted");
      if (request.tools.constrained())
        fuzz::require(structured::JsonSchema::compile(r.sampling.json_schema).ok(), "a tool schema that does not compile");
      if (r.sampling.response_format == ResponseFormat::json_schema)
        fuzz::require(structured::JsonSchema::compile(r.sampling.json_schema).ok(), "a schema that does not compile accepted");
      if (r.sampling.response_format == ResponseFormat::regex)
        fuzz::require(structured::Regex::compile(r.sampling.regex).ok(), "a regex that does not compile accepted");
      if (r.sampling.response_format == ResponseFormat::grammar)
        fuzz::require(structured::Grammar::compile(r.sampling.grammar).ok(), "a grammar that does not compile accepted");
    }
  }
  // The body as a model's text, for each reader: whole, and in pieces of 1 to 7 bytes.
  for (const ToolUse::Choice choice : {ToolUse::Choice::automatic, ToolUse::Choice::required, ToolUse::Choice::named}) {
    for (const ToolCallFormat format : {ToolCallFormat::hermes, ToolCallFormat::mistral, ToolCallFormat::llama3_json}) {
      ToolUse use;
      use.choice = choice;
      use.format = format;
      use.function = "f";
      auto run = [&](size_t piece) {
        ToolCallReader reader(use);
        std::string content;
        std::vector<std::string> calls;  // name and arguments, streamed arguments added to the last
        auto take = [&](const ToolCallReader::Delta& d) {
          content += d.content;
          for (const ToolCall& c : d.calls) calls.push_back(c.name + "(" + c.arguments);
          if (!d.arguments.empty()) {
            fuzz::require(!calls.empty(), "arguments streamed before their call");
            calls.back() += d.arguments;
          }
        };
        for (size_t at = 0; at < body.size(); at += piece) take(reader.push(std::string_view(body).substr(at, piece)));
        take(reader.push("", true));
        fuzz::require(content.size() <= body.size(), "a reader gave more content than the text");
        if (calls.empty()) fuzz::require(content == body, "a reader without calls did not give the text as it is");
        return std::make_pair(content, calls);
      };
      const auto whole = run(body.size() + 1);
      const auto pieces = run(1 + size % 7);
      fuzz::require(whole == pieces, "a reader read the text differently in pieces");
    }
  }
  // The body as a reasoning model's reply, the block opened by the reply or by the prompt: whole and in pieces.
  for (const bool opened : {false, true}) {
    auto run = [&](size_t piece) {
      ReasoningReader reader(opened);
      std::string reasoning, content;
      for (size_t at = 0; at < body.size(); at += piece) {
        ReasoningReader::Delta d = reader.push(std::string_view(body).substr(at, piece));
        reasoning += d.reasoning;
        content += d.content;
      }
      ReasoningReader::Delta d = reader.push("", true);
      reasoning += d.reasoning;
      content += d.content;
      fuzz::require(reasoning.size() + content.size() <= body.size(), "a reasoning reader gave more than the text");
      return std::make_pair(reasoning, content);
    };
    fuzz::require(run(body.size() + 1) == run(1 + size % 7), "a reasoning reader read the text differently in pieces");
  }
  return 0;
}
