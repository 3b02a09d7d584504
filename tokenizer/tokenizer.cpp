#include "tokenizer/tokenizer.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.hpp"
#include "tokenizer/bpe_model.hpp"
#include "tokenizer/decoders.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/normalizers.hpp"
#include "tokenizer/pre_tokenizers.hpp"
#include "tokenizer/unicode.hpp"
#include "tokenizer/utf8.hpp"

namespace actord {

namespace fs = std::filesystem;
using nlohmann::json;

struct Tokenizer::Impl {
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  tok::BpeModel model;
  tok::Decoder decoder;
  tok::AddedVocabulary added;
  // Post-processing: the TemplateProcessing single template, each item either special ids or the sequence
  // (marked by `is_sequence`).
  struct TemplateItem {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  bool has_template = false;
  std::vector<TemplateItem> single;
  bool add_bos = false, add_eos = false;  // tokenizer_config fallback when post_processor is null
  std::optional<int32_t> bos, eos;
  std::vector<int32_t> stop_ids;
  int32_t vocab_size = 0;
  bool byte_fallback_decoder = false;
  bool needs_valid_utf8 = false;  // regex / Unicode steps: invalid input is repaired first (U+FFFD)

  std::optional<int32_t> lookup(std::string_view token) const {
    if (auto id = added.find_content(token)) return id;
    return model.token_to_id(token);
  }
  const std::string* token_of(int32_t id) const {
    if (const tok::AddedToken* t = added.find_id(id)) return &t->content;
    return model.id_to_token(id);
  }
};

namespace {

// Reads and parses a JSON file. `required`: a missing file is an error; otherwise an absent file gives null.
Result<json> read_json(const fs::path& path, bool required) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    if (!required) return json();
    return make_error(Errc::not_found, "tokenizer file not found: " + path.string());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::not_found, "cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(Errc::parse_error, path.filename().string() + ": malformed JSON (" + path.string() + ")");
  return j;
}

// A token named in tokenizer_config.json: a string, or an AddedToken object with "content".
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

bool config_flag(const json& cfg, const char* key, bool dflt) {
  if (!cfg.is_object() || !cfg.contains(key) || !cfg[key].is_boolean()) return dflt;
  return cfg[key].get<bool>();
}

Status parse_post_processor(const json& j, Tokenizer::Impl& impl, const std::string& where) {
  if (j.is_null()) return Status::success();
  const std::string type = j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type == "ByteLevel") return Status::success();  // only trims offsets: no effect on ids
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return make_error(Errc::parse_error, where + ": post_processor Sequence has no 'processors' list");
    }
    for (const json& sub : j["processors"]) {
      if (sub.is_object() && sub.contains("type") && sub["type"] == "TemplateProcessing" && impl.has_template) {
        return make_error(Errc::unsupported, where + ": post_processor Sequence with two TemplateProcessing is not supported");
      }
      ACTORD_TRY_STATUS(parse_post_processor(sub, impl, where));
    }
    return Status::success();
  }
  if (type != "TemplateProcessing") {
    return make_error(Errc::unsupported, where + ": post_processor type '" + type + "' is not supported");
  }
  const json specials = j.contains("special_tokens") ? j["special_tokens"] : json::object();
  auto special_ids = [&](const std::string& name, std::vector<int32_t>& ids) -> Status {
    if (specials.is_object() && specials.contains(name) && specials[name].contains("ids")) {
      ids.clear();
      const json& list = specials[name]["ids"];
      if (!list.is_array()) return make_error(Errc::parse_error, where + ": post_processor special token '" + name + "': ids must be a list");
      for (const json& v : list) {
        const auto id = tok::token_id_of(v);
        if (!id) return make_error(Errc::parse_error, where + ": post_processor special token '" + name + "' has a bad id");
        ids.push_back(*id);
      }
      return Status::success();
    }
    if (auto id = impl.lookup(name)) {
      ids = {*id};
      return Status::success();
    }
    return make_error(Errc::parse_error, where + ": post_processor names unknown special token '" + name + "'");
  };
  const json single = j.contains("single") ? j["single"] : json();
  if (single.is_string()) {  // the "<s> $A" shorthand
    std::istringstream words(single.get<std::string>());
    std::string w;
    while (words >> w) {
      Tokenizer::Impl::TemplateItem item;
      const std::string base = w.substr(0, w.rfind(':') == std::string::npos || w.rfind(':') == 0 ? w.size() : w.rfind(':'));
      if (base.size() >= 2 && base[0] == '$') {
        item.is_sequence = true;
      } else {
        ACTORD_TRY_STATUS(special_ids(base, item.ids));
      }
      impl.single.push_back(std::move(item));
    }
  } else if (single.is_array()) {
    for (const json& piece : single) {
      Tokenizer::Impl::TemplateItem item;
      if (piece.contains("Sequence")) {
        item.is_sequence = true;
      } else if (piece.contains("SpecialToken")) {
        ACTORD_TRY_STATUS(special_ids(piece["SpecialToken"].at("id").get<std::string>(), item.ids));
      } else {
        return make_error(Errc::parse_error, where + ": bad TemplateProcessing item " + piece.dump());
      }
      impl.single.push_back(std::move(item));
    }
  } else {
    return make_error(Errc::parse_error, where + ": TemplateProcessing has no 'single' template");
  }
  impl.has_template = true;
  return Status::success();
}

// The three documents of a model folder, or those a GGUF file's metadata makes (tokenizer/gguf_vocab.hpp).
Result<TokenizerDocuments> read_documents(const fs::path& path) {
  if (GgufFile::is_gguf(path)) {
    auto file = GgufFile::open(path);
    if (!file) return file.error();
    return tokenizer_documents_from_gguf(*file);
  }
  TokenizerDocuments docs;
  auto tj = read_json(path / "tokenizer.json", true);
  if (!tj.ok()) return tj.error();
  auto cfg = read_json(path / "tokenizer_config.json", false);
  if (!cfg.ok()) return cfg.error();
  auto gen = read_json(path / "generation_config.json", false);
  if (!gen.ok()) return gen.error();
  docs.tokenizer = std::move(*tj);
  docs.config = std::move(*cfg);
  docs.generation = std::move(*gen);
  return docs;
}

Status load_impl(const fs::path& path, Tokenizer::Impl& impl) {
  const std::string where = "tokenizer.json";
  auto docs = read_documents(path);
  if (!docs) return docs.error();
  const json* tj = &docs->tokenizer;
  const json* cfg = &docs->config;
  const json* gen = &docs->generation;
  const json& t = *tj;
  if (!t.is_object()) return make_error(Errc::parse_error, where + ": top level is not an object");
  auto field = [&](const char* key) { return t.contains(key) ? t[key] : json(); };

  auto norm = tok::Normalizer::from_json(field("normalizer"), where);
  if (!norm.ok()) return norm.error();
  impl.normalizer = std::move(norm).value();
  auto pre = tok::PreTokenizer::from_json(field("pre_tokenizer"), where);
  if (!pre.ok()) return pre.error();
  impl.pre_tokenizer = std::move(pre).value();
  auto model = tok::BpeModel::from_json(field("model"), where);
  if (!model.ok()) return model.error();
  impl.model = std::move(model).value();
  auto dec = tok::Decoder::from_json(field("decoder"), where);
  if (!dec.ok()) return dec.error();
  impl.decoder = std::move(dec).value();
  impl.byte_fallback_decoder = impl.decoder.has_byte_fallback();
  auto added = tok::AddedVocabulary::from_json(field("added_tokens"), impl.normalizer, where);
  if (!added.ok()) return added.error();
  impl.added = std::move(added).value();
  try {
    ACTORD_TRY_STATUS(parse_post_processor(field("post_processor"), impl, where));
  } catch (const json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad post_processor: " + e.what());
  }

  impl.needs_valid_utf8 = impl.normalizer.needs_valid_utf8() || impl.pre_tokenizer.needs_valid_utf8();
  impl.vocab_size = impl.model.id_limit();
  for (const auto& a : impl.added.tokens()) impl.vocab_size = std::max(impl.vocab_size, a.id + 1);
  for (const auto& item : impl.single) {
    for (int32_t id : item.ids) {
      if (id >= impl.vocab_size) {
        return make_error(Errc::parse_error, where + ": post_processor special token id " + std::to_string(id) +
                                                 " is outside the vocabulary (size " + std::to_string(impl.vocab_size) + ")");
      }
    }
  }

  const json& c = *cfg;
  const json& g = *gen;
  if (auto b = config_token(c, "bos_token")) impl.bos = impl.lookup(*b);
  if (!impl.bos && g.is_object() && g.contains("bos_token_id")) impl.bos = tok::token_id_of(g["bos_token_id"]);
  if (auto e = config_token(c, "eos_token")) impl.eos = impl.lookup(*e);
  impl.add_bos = config_flag(c, "add_bos_token", false);
  impl.add_eos = config_flag(c, "add_eos_token", false);

  const json eos_gen = g.is_object() && g.contains("eos_token_id") ? g["eos_token_id"] : json();
  if (eos_gen.is_number()) {
    const auto id = tok::token_id_of(eos_gen);
    if (!id) return make_error(Errc::parse_error, "generation_config.json: bad eos_token_id");
    impl.stop_ids.push_back(*id);
  } else if (eos_gen.is_array()) {
    for (const json& v : eos_gen) {
      const auto id = tok::token_id_of(v);
      if (!id) return make_error(Errc::parse_error, "generation_config.json: bad eos_token_id entry");
      impl.stop_ids.push_back(*id);
    }
  } else if (impl.eos) {
    impl.stop_ids.push_back(*impl.eos);
  }
  return Status::success();
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const fs::path& model_dir) {
  auto impl = std::make_shared<Impl>();
  try {
    ACTORD_TRY_STATUS(load_impl(model_dir, *impl));
  } catch (const std::exception& e) {  // belt and braces: load never throws
    return make_error(Errc::parse_error, "tokenizer.json: " + std::string(e.what()));
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (m.needs_valid_utf8 && !tok::is_valid_utf8(text)) {
    repaired = tok::utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  std::vector<tok::Piece> raw, pieces;
  m.added.split(text, true, /*normalized_pass=*/false, raw);
  for (tok::Piece& p : raw) {
    if (p.id) {
      pieces.push_back(std::move(p));
      continue;
    }
    const std::string normalized = m.normalizer.apply(std::move(p.text));
    m.added.split(normalized, p.at_origin, /*normalized_pass=*/true, pieces);
  }
  std::vector<std::string> words;
  for (const tok::Piece& p : pieces) {
    if (p.id) {
      ids.push_back(*p.id);
      continue;
    }
    words.clear();
    m.pre_tokenizer.split(p.text, p.at_origin, words);
    for (const std::string& w : words) m.model.tokenize(w, ids);
  }
  if (!add_special_tokens) return ids;
  if (m.has_template) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& item : m.single) {
      if (item.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
    }
    return out;
  }
  if (m.add_bos && m.bos) ids.insert(ids.begin(), *m.bos);
  if (m.add_eos && m.eos) ids.push_back(*m.eos);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* t = m.token_of(id);
    if (!t) continue;
    if (skip_special_tokens && is_special(id)) continue;
    tokens.push_back(*t);
  }
  return m.decoder.decode(std::move(tokens));
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::vector<int32_t>& Tokenizer::stop_ids() const { return impl_->stop_ids; }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->lookup(token); }

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const std::string* t = impl_->token_of(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* t = impl_->added.find_id(id);
  return t && t->special;
}

std::optional<std::string> Tokenizer::token_bytes(int32_t id) const {
  const std::string* t = impl_->token_of(id);
  if (!t || is_special(id)) return std::nullopt;
  return impl_->decoder.token_bytes(*t);
}

bool Tokenizer::is_byte_token(int32_t id) const {
  if (!impl_->byte_fallback_decoder) return false;
  const std::string* t = impl_->token_of(id);
  return t && tok::parse_byte_token(*t) >= 0;
}

}  // namespace actord
