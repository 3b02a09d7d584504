#include "tokenizer/pre_tokenizers.hpp"

#include "tokenizer/normalizers.hpp"

namespace actord::tok {

Status PreTokenizer::parse_into(const nlohmann::json& j, const std::string& where, std::vector<Metaspace>& steps) {
  if (j.is_null()) return Status::success();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error(Errc::parse_error, where + ": pre_tokenizer has no 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return make_error(Errc::parse_error, where + ": pre_tokenizer Sequence has no 'pretokenizers' list");
    }
    for (const auto& sub : j["pretokenizers"]) ACTORD_TRY_STATUS(parse_into(sub, where, steps));
    return Status::success();
  }
  if (type != "Metaspace") {
    return make_error(Errc::unsupported, where + ": pre_tokenizer type '" + type + "' is not supported");
  }
  Metaspace m;
  m.replacement = j.value("replacement", m.replacement);
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") {
      m.prepend = Prepend::always;
    } else if (s == "first") {
      m.prepend = Prepend::first;
    } else if (s == "never") {
      m.prepend = Prepend::never;
    } else {
      return make_error(Errc::unsupported, where + ": Metaspace prepend_scheme '" + s + "' is not supported");
    }
  } else {
    m.prepend = j.value("add_prefix_space", true) ? Prepend::always : Prepend::never;
  }
  m.split = j.value("split", true);
  steps.push_back(std::move(m));
  return Status::success();
}

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  try {
    ACTORD_TRY_STATUS(parse_into(j, where, p.steps_));
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad pre_tokenizer: " + e.what());
  }
  return p;
}

void PreTokenizer::split(const std::string& piece, bool at_origin, std::vector<std::string>& out) const {
  // Each word carries whether it starts at offset 0 of the original text.
  std::vector<std::pair<std::string, bool>> words{{piece, at_origin}};
  for (const Metaspace& m : steps_) {
    std::vector<std::pair<std::string, bool>> next;
    for (auto& [w, origin] : words) {
      std::string s = replace_all(w, " ", m.replacement);
      const bool starts = s.compare(0, m.replacement.size(), m.replacement) == 0;
      if (!starts && (m.prepend == Prepend::always || (m.prepend == Prepend::first && origin))) {
        s.insert(0, m.replacement);
      }
      if (!m.split || m.replacement.empty()) {
        if (!s.empty()) next.emplace_back(std::move(s), origin);
        continue;
      }
      // MergedWithNext: every replacement character starts a new word.
      std::size_t begin = 0;
      bool first = true;
      for (std::size_t k = s.find(m.replacement, 1); k != std::string::npos; k = s.find(m.replacement, k + 1)) {
        next.emplace_back(s.substr(begin, k - begin), origin && first);
        first = false;
        begin = k;
      }
      if (begin < s.size()) next.emplace_back(s.substr(begin), origin && first);
    }
    words = std::move(next);
  }
  for (auto& [w, origin] : words) {
    if (!w.empty()) out.push_back(std::move(w));
  }
}

}  // namespace actord::tok
