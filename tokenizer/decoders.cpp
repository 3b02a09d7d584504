#include "tokenizer/decoders.hpp"

#include "tokenizer/byte_level.hpp"
#include "tokenizer/normalizers.hpp"
#include "tokenizer/unicode.hpp"
#include "tokenizer/utf8.hpp"

namespace actord::tok {

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Status Decoder::parse_into(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps) {
  if (j.is_null()) return Status::success();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error(Errc::parse_error, where + ": decoder has no 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return make_error(Errc::parse_error, where + ": decoder Sequence has no 'decoders' list");
    }
    for (const auto& sub : j["decoders"]) ACTORD_TRY_STATUS(parse_into(sub, where, steps));
    return Status::success();
  }
  Step st;
  if (type == "Replace") {
    st.kind = Kind::replace;
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      st.a = pat["String"].get<std::string>();
    } else if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      st.kind = Kind::replace_regex;
      auto re = Regex::compile(pat["Regex"].get<std::string>());
      if (!re.ok()) return make_error(Errc::parse_error, where + ": decoder Replace: " + re.error().message);
      st.regex = std::move(re).value();
    } else {
      return make_error(Errc::parse_error, where + ": decoder Replace has no String pattern");
    }
    st.b = j.value("content", std::string());
  } else if (type == "ByteFallback") {
    st.kind = Kind::byte_fallback;
  } else if (type == "Fuse") {
    st.kind = Kind::fuse;
  } else if (type == "Strip") {
    st.kind = Kind::strip;
    st.a = j.value("content", std::string(" "));
    st.start = j.value("start", std::size_t{0});
    st.stop = j.value("stop", std::size_t{0});
  } else if (type == "ByteLevel") {
    st.kind = Kind::byte_level;
  } else if (type == "Metaspace") {
    st.kind = Kind::metaspace;
    st.a = j.value("replacement", std::string("\xE2\x96\x81"));
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      st.prepend = j["prepend_scheme"].get<std::string>() != "never";
    } else {
      st.prepend = !j.contains("add_prefix_space") || !j["add_prefix_space"].is_boolean() ||
                   j["add_prefix_space"].get<bool>();
    }
  } else {
    return make_error(Errc::unsupported, where + ": decoder type '" + type + "' is not supported");
  }
  steps.push_back(std::move(st));
  return Status::success();
}

Result<Decoder> Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  Decoder d;
  d.present_ = !j.is_null();
  try {
    ACTORD_TRY_STATUS(parse_into(j, where, d.steps_));
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": bad decoder: " + e.what());
  }
  return d;
}

bool Decoder::has_byte_fallback() const {
  for (const Step& st : steps_) {
    if (st.kind == Kind::byte_fallback) return true;
  }
  return false;
}

namespace {

void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (is_valid_utf8(bytes)) {
    out.push_back(bytes);
  } else {
    for (std::size_t i = 0; i < bytes.size(); ++i) out.emplace_back(kReplacementChar);
  }
  bytes.clear();
}

// Splits `s` into its characters (invalid bytes as single characters).
std::vector<std::string_view> chars_of(std::string_view s) {
  std::vector<std::string_view> cs;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = next_char_len(s, i);
    cs.push_back(s.substr(i, n));
    i += n;
  }
  return cs;
}

std::string strip_token(const std::string& t, const std::string& content, std::size_t start, std::size_t stop) {
  const auto cs = chars_of(t);
  std::size_t b = 0, e = cs.size();
  while (b < start && b < e && cs[b] == content) ++b;
  std::size_t removed = 0;
  while (removed < stop && e > b && cs[e - 1] == content) {
    --e;
    ++removed;
  }
  std::string out;
  for (std::size_t i = b; i < e; ++i) out.append(cs[i]);
  return out;
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::replace:
        for (auto& t : tokens) t = replace_all(t, st.a, st.b);
        break;
      case Kind::replace_regex:
        for (auto& t : tokens) t = st.regex.replace_all(t, st.b);
        break;
      case Kind::byte_level: {
        std::string bytes;
        for (const auto& t : tokens) {
          if (!byte_level_decode(t, bytes)) bytes += t;
        }
        tokens.assign(1, utf8_lossy(bytes));
        break;
      }
      case Kind::byte_fallback: {
        std::vector<std::string> out;
        std::string bytes;
        for (auto& t : tokens) {
          const int b = parse_byte_token(t);
          if (b >= 0) {
            bytes.push_back(static_cast<char>(b));
          } else {
            flush_bytes(bytes, out);
            out.push_back(std::move(t));
          }
        }
        flush_bytes(bytes, out);
        tokens = std::move(out);
        break;
      }
      case Kind::fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::strip:
        for (auto& t : tokens) t = strip_token(t, st.a, st.start, st.stop);
        break;
      case Kind::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          // tokenizers drops every replacement character of the first token when it prepends, else maps to ' '.
          tokens[i] = replace_all(tokens[i], st.a, i == 0 && st.prepend ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string Decoder::token_bytes(const std::string& token) const {
  if (!present_) return token;
  std::string t = token;
  bool fused = false;
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::replace:
        t = replace_all(t, st.a, st.b);
        break;
      case Kind::replace_regex:
        t = st.regex.replace_all(t, st.b);
        break;
      case Kind::byte_level: {
        std::string bytes;
        if (!byte_level_decode(t, bytes)) bytes = t;
        t = std::move(bytes);
        break;
      }
      case Kind::byte_fallback:
        if (const int b = parse_byte_token(t); b >= 0) t = std::string(1, static_cast<char>(b));
        break;
      case Kind::fuse:
        fused = true;
        break;
      case Kind::strip:
        if (!fused) t = strip_token(t, st.a, st.start, st.stop);
        break;
      case Kind::metaspace:
        t = replace_all(t, st.a, " ");
        break;
    }
  }
  return t;
}

}  // namespace actord::tok
