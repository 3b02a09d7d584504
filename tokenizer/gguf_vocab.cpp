#include "tokenizer/gguf_vocab.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace actord {

using nlohmann::json;

namespace {

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// GPT-4o's o200k (llama.cpp's "gpt-4o" pre-tokenizer: Phi-4-mini, Llama 4), as its tokenizer.json writes it.
const char* const kGpt4oRegex =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex, bool trim_offsets) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", trim_offsets}, {"use_regex", use_regex}};
}

// A pre-tokenizer that splits by `regex` (matches kept whole) and then maps bytes (llama.cpp's regex pre-tokenizers).
json split_then_bytes(const char* regex, bool trim_offsets) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false, trim_offsets)}}};
}

json template_with(const std::vector<std::pair<std::string, int64_t>>& before, bool sequence,
                   const std::vector<std::pair<std::string, int64_t>>& after) {
  json single = json::array(), specials = json::object();
  auto add = [&](const std::pair<std::string, int64_t>& t) {
    single.push_back({{"SpecialToken", {{"id", t.first}, {"type_id", 0}}}});
    specials[t.first] = {{"id", t.first}, {"ids", {t.second}}, {"tokens", {t.first}}};
  };
  for (const auto& t : before) add(t);
  if (sequence) single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (const auto& t : after) add(t);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", json::array()}, {"special_tokens", specials}};
}

// Offsets of the UTF-8 code points of s (each start), for splitting pieces between code points.
std::vector<size_t> code_point_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  return starts;
}

// HF's SentencePieceExtractor: for every piece, each split into two pieces of the vocabulary (sorted by the ids of
// the halves), all ordered by the whole piece's score, highest first (a stable sort: ties keep id order).
json spm_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                const std::unordered_map<std::string, int64_t>& vocab) {
  struct Merge {
    int64_t left, right;
    double score;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& piece = tokens[id];
    local.clear();
    const auto starts = code_point_starts(piece);
    for (size_t k = 1; k < starts.size(); ++k) {
      auto l = vocab.find(piece.substr(0, starts[k]));
      auto r = vocab.find(piece.substr(starts[k]));
      if (l != vocab.end() && r != vocab.end()) local.push_back({l->second, r->second, scores[id]});
    }
    std::sort(local.begin(), local.end(),
              [](const Merge& a, const Merge& b) { return a.left != b.left ? a.left < b.left : a.right < b.right; });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json out = json::array();
  for (const Merge& m : merges) out.push_back({tokens[m.left], tokens[m.right]});
  return out;
}

// What both documents need of a file's vocabulary: its model, tokens, special ids (checked) and BOS / EOS flags.
struct Specials {
  std::string model;
  const std::vector<std::string>* tokens = nullptr;
  std::optional<int64_t> bos, eos, eot, unk;
  bool add_bos = false, add_eos = false;
};

Result<Specials> specials_of(const GgufFile& file) {
  const std::string where = file.path().string();
  Specials sp;
  auto model = file.string("tokenizer.ggml.model");
  if (!model) return model.error();
  sp.model = *model;
  const GgufValue* tokens_value = file.find("tokenizer.ggml.tokens");
  if (!tokens_value || tokens_value->kind != GgufValue::Kind::array ||
      tokens_value->element != GgufValue::Kind::string || tokens_value->strings.empty()) {
    return make_error(Errc::invalid_config, where + ": tokenizer.ggml.tokens is missing or not a list of strings");
  }
  sp.tokens = &tokens_value->strings;
  const int64_t n = static_cast<int64_t>(sp.tokens->size());
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &sp.bos}, {"tokenizer.ggml.eos_token_id", &sp.eos},
                         {"tokenizer.ggml.eot_token_id", &sp.eot}, {"tokenizer.ggml.unknown_token_id", &sp.unk}}) {
    const auto v = file.integer_or(key);
    if (!v) continue;
    if (*v < 0 || *v >= n) {
      return make_error(Errc::invalid_config, where + ": " + key + " = " + std::to_string(*v) + " is not a token id");
    }
    *id = *v;
  }
  sp.add_bos = file.boolean_or("tokenizer.ggml.add_bos_token").value_or(sp.model == "llama");
  sp.add_eos = file.boolean_or("tokenizer.ggml.add_eos_token").value_or(false);
  return sp;
}

// tokenizer_config.json and generation_config.json of the specials and the chat template.
void write_configs(const GgufFile& file, const Specials& sp, TokenizerDocuments& docs) {
  const std::vector<std::string>& tokens = *sp.tokens;
  json& c = docs.config;
  c = json::object();
  if (sp.bos) c["bos_token"] = tokens[*sp.bos];
  if (sp.eos) c["eos_token"] = tokens[*sp.eos];
  if (sp.unk) c["unk_token"] = tokens[*sp.unk];
  c["add_bos_token"] = sp.add_bos;
  c["add_eos_token"] = sp.add_eos;
  if (const GgufValue* tmpl = file.find("tokenizer.chat_template"); tmpl && tmpl->kind == GgufValue::Kind::string) {
    c["chat_template"] = tmpl->string;
  }
  json& g = docs.generation;
  g = json::object();
  if (sp.bos) g["bos_token_id"] = *sp.bos;
  if (sp.eos) {
    json stops = json::array({*sp.eos});
    if (sp.eot && *sp.eot != *sp.eos) stops.push_back(*sp.eot);
    g["eos_token_id"] = stops;
  }
}

}  // namespace

Result<TokenizerDocuments> tokenizer_config_from_gguf(const GgufFile& file) {
  auto sp = specials_of(file);
  if (!sp) return sp.error();
  TokenizerDocuments docs;
  write_configs(file, *sp, docs);
  return docs;
}

Result<TokenizerDocuments> tokenizer_documents_from_gguf(const GgufFile& file) {
  const std::string where = file.path().string();
  auto sp = specials_of(file);
  if (!sp) return sp.error();
  const std::vector<std::string>& tokens = *sp->tokens;
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int> types(tokens.size(), kNormal);
  if (const GgufValue* t = file.find("tokenizer.ggml.token_type")) {
    if (t->kind != GgufValue::Kind::array || t->numbers.size() != tokens.size()) {
      return make_error(Errc::invalid_config, where + ": tokenizer.ggml.token_type does not match the tokens");
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      const double type = t->numbers[i];  // any number the file holds; the known types are 1 .. 6
      types[i] = type >= double(kNormal) && type <= double(kByte) ? static_cast<int>(type) : kNormal;
    }
  }

  TokenizerDocuments docs;
  json vocab = json::object();
  std::unordered_map<std::string, int64_t> index;
  for (int64_t i = 0; i < n; ++i) {
    vocab[tokens[i]] = i;
    index.emplace(tokens[i], i);
  }
  json added = json::array();
  for (int64_t i = 0; i < n; ++i) {
    if (types[i] != kControl && types[i] != kUnknown && types[i] != kUserDefined) continue;
    added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", types[i] != kUserDefined}});
  }
  std::vector<std::pair<std::string, int64_t>> before, after;
  if (sp->add_bos && sp->bos) before.emplace_back(tokens[*sp->bos], *sp->bos);
  if (sp->add_eos && sp->eos) after.emplace_back(tokens[*sp->eos], *sp->eos);
  json& t = docs.tokenizer;
  t["version"] = "1.0";
  t["added_tokens"] = added;

  if (sp->model == "llama") {
    std::vector<double> scores(tokens.size(), 0.0);
    if (const GgufValue* s = file.find("tokenizer.ggml.scores")) {
      if (s->kind != GgufValue::Kind::array || s->numbers.size() != tokens.size()) {
        return make_error(Errc::invalid_config, where + ": tokenizer.ggml.scores does not match the tokens");
      }
      scores = s->numbers;
    }
    const bool space_prefix = file.boolean_or("tokenizer.ggml.add_space_prefix").value_or(true);
    json normalizers = json::array();
    if (space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}});
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    t["pre_tokenizer"] = nullptr;
    json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}}});
    if (space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    t["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", tokens[sp->unk.value_or(0)]},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                  {"byte_fallback", true}, {"ignore_merges", false}, {"vocab", vocab},
                  {"merges", spm_merges(tokens, scores, index)}};
    t["post_processor"] = before.empty() && after.empty() ? json(nullptr) : template_with(before, true, after);
  } else if (sp->model == "gpt2") {
    const GgufValue* merges = file.find("tokenizer.ggml.merges");
    if (!merges || merges->kind != GgufValue::Kind::array || merges->element != GgufValue::Kind::string) {
      return make_error(Errc::invalid_config, where + ": tokenizer.ggml.merges is missing or not a list of strings");
    }
    const auto pre_value = file.string("tokenizer.ggml.pre");
    const std::string pre = pre_value ? *pre_value : "default";
    bool ignore_merges = false;
    if (pre == "llama-bpe" || pre == "llama3") {
      t["normalizer"] = nullptr;
      t["pre_tokenizer"] = split_then_bytes(kLlama3Regex, true);
      ignore_merges = true;
    } else if (pre == "qwen2") {
      t["normalizer"] = {{"type", "NFC"}};
      t["pre_tokenizer"] = split_then_bytes(kQwen2Regex, false);
    } else if (pre == "gpt-4o") {
      t["normalizer"] = nullptr;
      t["pre_tokenizer"] = split_then_bytes(kGpt4oRegex, true);
    } else if (pre == "gpt-2" || pre == "default") {
      t["normalizer"] = nullptr;
      t["pre_tokenizer"] = byte_level(true, true);
    } else {
      return make_error(Errc::unsupported, where + ": tokenizer.ggml.pre '" + pre +
                                               "' is not supported (known: llama-bpe, qwen2, gpt-4o, gpt-2, default)");
    }
    t["decoder"] = byte_level(true, true);
    t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false},
                  {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges->strings}};
    t["post_processor"] = before.empty() && after.empty() ? json(nullptr) : template_with(before, true, after);
  } else {
    return make_error(Errc::unsupported, where + ": tokenizer.ggml.model '" + sp->model +
                                             "' is not supported (known: llama, gpt2)");
  }

  write_configs(file, *sp, docs);
  return docs;
}

}  // namespace actord
