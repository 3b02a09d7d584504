#include "tokenizer/chat_template.hpp"

#include <fstream>
#include <new>
#include <sstream>

#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/jinja_ast.hpp"
#include "tokenizer/jinja_eval.hpp"

namespace actord {

struct ChatTemplate::Impl {
  std::string source;
  jinja::Body body;
};

namespace {

Error to_error(const jinja::TemplateError& e) {
  if (e.raw) return make_error(e.code, e.message);
  if (e.line > 0) return make_error(e.code, "chat_template line " + std::to_string(e.line) + ": " + e.message);
  return make_error(e.code, "chat_template: " + e.message);
}

// Runs f (which returns a Result) and turns anything the engine throws into an Error; `doing` names the phase.
template <class F>
auto guarded(const char* doing, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const jinja::TemplateError& e) {
    return to_error(e);
  } catch (const std::bad_alloc&) {
    return make_error(Errc::resource_exhausted, std::string("chat_template: out of memory while ") + doing);
  } catch (const std::exception& e) {
    return make_error(Errc::internal, std::string("chat_template: ") + e.what());
  } catch (...) {
    return make_error(Errc::internal, std::string("chat_template: unknown error while ") + doing);
  }
}

template <class J>
Result<std::string> render_impl(const ChatTemplate::Impl& impl, const J& context) {
  return guarded("rendering", [&]() -> Result<std::string> {
    if (!context.is_object() && !context.is_null())
      return make_error(Errc::invalid_argument, "chat_template: the render context must be a JSON object");
    return jinja::render_body(impl.body, jinja::from_json(context));
  });
}

Result<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(Errc::not_found, "cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<nlohmann::json> read_json(const std::filesystem::path& p) {
  auto text = read_file(p);
  if (!text.ok()) return text.error();
  try {
    return nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, p.string() + ": " + e.what());
  }
}

// A tokenizer_config special token: a string or an AddedToken object {"content": ...}.
const nlohmann::json* token_string(const nlohmann::json& v) {
  if (v.is_string()) return &v;
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return &*it;
  }
  return nullptr;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  return guarded("parsing", [&]() -> Result<ChatTemplate> {
    auto impl = std::make_shared<Impl>();
    impl->source = std::string(source);
    impl->body = jinja::parse_template(source);
    return ChatTemplate(std::move(impl));
  });
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context) const { return render_impl(*impl_, context); }

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_impl(*impl_, context);
}

const std::string& ChatTemplate::source() const { return impl_->source; }

Result<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir, nlohmann::json* special_tokens_out) {
  const auto config_path = model_dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  std::error_code ec;
  if (GgufFile::is_gguf(model_dir)) {  // tokenizer.chat_template and the special tokens of its metadata
    auto file = GgufFile::open(model_dir);
    if (!file) return file.error();
    auto docs = tokenizer_config_from_gguf(*file);
    if (!docs) return docs.error();
    config = std::move(docs->config);
  } else if (std::filesystem::exists(config_path, ec)) {
    auto parsed = read_json(config_path);
    if (!parsed.ok()) return parsed.error();
    if (!parsed->is_object()) return make_error(Errc::parse_error, config_path.string() + ": not a JSON object");
    config = std::move(*parsed);
  }
  if (special_tokens_out) {
    *special_tokens_out = nlohmann::json::object();
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      auto it = config.find(key);
      if (it == config.end()) continue;
      if (const auto* s = token_string(*it)) (*special_tokens_out)[key] = *s;
    }
  }
  std::string source;
  bool found = false;
  auto it = config.find("chat_template");
  if (it != config.end() && it->is_string()) {
    source = it->get<std::string>();
    found = true;
  } else if (it != config.end() && it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object()) continue;
      auto name = entry.find("name");
      auto tmpl = entry.find("template");
      if (name != entry.end() && *name == "default" && tmpl != entry.end() && tmpl->is_string()) {
        source = tmpl->get<std::string>();
        found = true;
      }
    }
    if (!found) return make_error(Errc::not_found, config_path.string() + ": no \"default\" chat template");
  } else if (it != config.end() && !it->is_null()) {
    return make_error(Errc::parse_error, config_path.string() + ": chat_template must be a string or a list");
  }
  if (!found && std::filesystem::exists(model_dir / "chat_template.jinja", ec)) {
    auto text = read_file(model_dir / "chat_template.jinja");
    if (!text.ok()) return text.error();
    source = std::move(*text);
    found = true;
  }
  if (!found && std::filesystem::exists(model_dir / "chat_template.json", ec)) {
    auto parsed = read_json(model_dir / "chat_template.json");
    if (!parsed.ok()) return parsed.error();
    if (parsed->is_object() && parsed->contains("chat_template") && (*parsed)["chat_template"].is_string()) {
      source = (*parsed)["chat_template"].get<std::string>();
      found = true;
    }
  }
  if (!found) return make_error(Errc::not_found, "no chat template in " + model_dir.string());
  return ChatTemplate::parse(source);
}

}  // namespace actord
