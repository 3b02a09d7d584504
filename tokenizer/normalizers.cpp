#include "tokenizer/normalizers.hpp"

#include "tokenizer/utf8.hpp"

namespace actord::tok {

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (true) {
    const std::size_t k = s.find(from, i);
    if (k == std::string_view::npos) break;
    out.append(s.substr(i, k - i));
    out.append(to);
    i = k + from.size();
  }
  out.append(s.substr(i));
  return out;
}

namespace {

char32_t lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c == 0x130) return 'i';
  if (c >= 0x100 && c <= 0x137 && (c % 2 == 0)) return c + 1;
  if (c >= 0x139 && c <= 0x148 && (c % 2 == 1)) return c + 1;
  if (c >= 0x14A && c <= 0x177 && (c % 2 == 0)) return c + 1;
  if (c == 0x178) return 0xFF;
  if ((c == 0x179 || c == 0x17B || c == 0x17D)) return c + 1;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

std::string strip_ws(std::string_view s, bool left, bool right) {
  std::size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      std::size_t n = 0;
      const char32_t c = decode_char(s, b, &n);
      if (!is_unicode_whitespace(c)) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      std::size_t k = e - 1;  // walk back to the start of the last character
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      std::size_t n = 0;
      const char32_t c = decode_char(s, k, &n);
      if (!is_unicode_whitespace(c)) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 0;
    const char32_t c = decode_char(s, i, &n);
    if (c == 0xFFFD && s.substr(i, n) != kReplacementChar) {
      out.append(s.substr(i, n));  // keep invalid bytes as they are
    } else {
      append_utf8(out, lower_cp(c));
    }
    i += n;
  }
  return out;
}

Status Normalizer::parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps) {
  if (j.is_null()) return Status::success();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error(Errc::parse_error, where + ": normalizer has no 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return make_error(Errc::parse_error, where + ": normalizer Sequence has no 'normalizers' list");
    }
    for (const auto& sub : j["normalizers"]) ACTORD_TRY_STATUS(parse_into(sub, where, steps));
    return Status::success();
  }
  Step st;
  if (type == "Prepend") {
    st.kind = Kind::prepend;
    st.a = j.value("prepend", std::string());
  } else if (type == "Replace") {
    st.kind = Kind::replace;
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      st.a = pat["String"].get<std::string>();
    } else if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      st.kind = Kind::replace_regex;
      auto re = Regex::compile(pat["Regex"].get<std::string>());
      if (!re.ok()) return make_error(Errc::parse_error, where + ": normalizer Replace: " + re.error().message);
      st.regex = std::move(re).value();
    } else {
      return make_error(Errc::parse_error, where + ": normalizer Replace has no String pattern");
    }
    st.b = j.value("content", std::string());
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    st.kind = Kind::unicode;
    st.form = type == "NFC" ? NormalForm::nfc : type == "NFD" ? NormalForm::nfd : type == "NFKC" ? NormalForm::nfkc : NormalForm::nfkd;
  } else if (type == "Lowercase") {
    st.kind = Kind::lowercase;
  } else if (type == "Strip") {
    st.kind = Kind::strip;
    st.left = j.value("strip_left", true);
    st.right = j.value("strip_right", true);
  } else {
    return make_error(Errc::unsupported, where + ": normalizer type '" + type + "' is not supported");
  }
  steps.push_back(std::move(st));
  return Status::success();
}

Result<Normalizer> Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  try {
    ACTORD_TRY_STATUS(parse_into(j, where, n.steps_));
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad normalizer: " + e.what());
  }
  return n;
}

bool Normalizer::needs_valid_utf8() const {
  for (const Step& st : steps_) {
    if (st.kind == Kind::replace_regex || st.kind == Kind::unicode) return true;
  }
  return false;
}

std::string Normalizer::apply(std::string s) const {
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::prepend:
        if (!s.empty()) s.insert(0, st.a);
        break;
      case Kind::replace: s = replace_all(s, st.a, st.b); break;
      case Kind::replace_regex: s = st.regex.replace_all(s, st.b); break;
      case Kind::unicode: s = normalize(s, st.form); break;
      case Kind::lowercase: s = to_lower(s); break;
      case Kind::strip: s = strip_ws(s, st.left, st.right); break;
    }
  }
  return s;
}

}  // namespace actord::tok
