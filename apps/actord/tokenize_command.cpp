// actord tokenize / detokenize: JSON lines on stdin, JSON lines on stdout, with a model folder's tokenizer.
#include <iostream>
#include <optional>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/actord/commands.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord::cli {
namespace {

// Runs `handle` on every stdin line; a bad line gets {"error": ...} and the others go on. Exit 2 if any was bad.
template <class Handle>
int for_each_json_line(Handle&& handle) {
  int code = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json out;
    try {
      // A line nested deeper than any request needs is refused while parsing (the parser recurses per level).
      constexpr int kMaxDepth = 64;
      auto parsed = nlohmann::ordered_json::parse(line, [](int depth, nlohmann::ordered_json::parse_event_t,
                                                           nlohmann::ordered_json&) {
        if (depth > kMaxDepth) throw std::invalid_argument("nested deeper than " + std::to_string(kMaxDepth) + " levels");
        return true;
      });
      out = handle(parsed);
    } catch (const std::exception& e) {
      out = {{"error", std::string("bad input line: ") + e.what()}};
    }
    if (out.contains("error")) code = 2;
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
  }
  return code;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, TokenizeArgs& args) {
  args.tokenize = app.add_subcommand(
      "tokenize", "Encode JSON lines {\"text\": ...} from stdin into {\"ids\": [...]} lines, with a model's tokenizer");
  args.tokenize->add_option("--model", args.model, "Model folder with tokenizer.json")->required();
  args.tokenize->add_flag("--no-special", args.no_special, "Do not add special tokens (BOS/EOS templates)");
  args.detokenize = app.add_subcommand(
      "detokenize", "Decode JSON lines {\"ids\": [...]} from stdin into {\"text\": ...} lines, with a model's tokenizer");
  args.detokenize->add_option("--model", args.model, "Model folder with tokenizer.json")->required();
  args.detokenize->add_flag("--skip-special", args.skip_special, "Leave special tokens out of the text");
}

int run_tokenize(const TokenizeArgs& args, bool decode) {
  auto tok = Tokenizer::load(args.model);
  if (!tok) {
    print_error(tok.error());
    return exit_code_for(tok.error());
  }
  if (!decode) {
    std::optional<ChatTemplate> chat;  // loaded on the first {"messages": ...} line
    nlohmann::json special_tokens;
    return for_each_json_line([&](const nlohmann::ordered_json& in) -> nlohmann::json {
      if (in.contains("messages")) {
        // The model's chat template renders the conversation; its text already holds the special tokens, so it
        // is encoded without adding more (as HF's apply_chat_template does).
        if (!chat) {
          nlohmann::json special;
          auto loaded = load_chat_template(args.model, &special);
          if (!loaded) return {{"error", loaded.error().message}};
          chat.emplace(std::move(*loaded));
          special_tokens = std::move(special);
        }
        nlohmann::ordered_json context = in;
        if (!context.contains("add_generation_prompt")) context["add_generation_prompt"] = true;
        for (const auto& [key, value] : special_tokens.items()) {
          if (!context.contains(key)) context[key] = value;
        }
        auto text = chat->render(context);
        if (!text) return {{"error", text.error().message}};
        return {{"ids", tok->encode(*text, false)}, {"text", *text}};
      }
      if (!in.contains("text") || !in["text"].is_string()) return {{"error", "expected {\"text\": \"...\"}"}};
      return {{"ids", tok->encode(in["text"].get<std::string>(), !args.no_special)}};
    });
  }
  return for_each_json_line([&](const nlohmann::ordered_json& in) -> nlohmann::json {
    if (!in.contains("ids") || !in["ids"].is_array()) return {{"error", "expected {\"ids\": [...]}"}};
    std::vector<int32_t> ids;
    for (const auto& v : in["ids"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok->vocab_size()) {
        return {{"error", "token id " + v.dump() + " is outside the vocabulary (size " +
                              std::to_string(tok->vocab_size()) + ")"}};
      }
      ids.push_back(v.get<int32_t>());
    }
    return {{"text", tok->decode(ids, args.skip_special)}};
  });
}

}  // namespace actord::cli
