#include "tokenizer/jinja_value.hpp"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace actord::jinja {

void fail(Errc code, int line, std::string message) { throw TemplateError{code, line, std::move(message), false}; }

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value make_dict() { return Value(std::make_shared<Dict>()); }

Value make_tuple(List items) {
  Value v(std::move(items));
  v.tuple = true;
  return v;
}

const char* type_name(const Value& v) {
  switch (v.v.index()) {
    case 0:
      return "Undefined";
    case 1:
      return "NoneType";
    case 2:
      return "bool";
    case 3:
      return "int";
    case 4:
      return "float";
    case 5:
      return "str";
    case 6:
      return "list";
    case 7:
      return v.dict().is_namespace ? "Namespace" : "dict";
    default:
      return "function";
  }
}

bool truthy(const Value& v) {
  switch (v.v.index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return v.as_bool();
    case 3:
      return v.as_int() != 0;
    case 4:
      return v.as_float() != 0.0;
    case 5:
      return !v.str().empty();
    case 6:
      return !v.list().empty();
    case 7:
      return v.dict().is_namespace || !v.dict().items.empty();
    default:
      return true;
  }
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's repr layout: scientific when exp < -4 or exp >= 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      out = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return neg ? "-" + out : out;
}

static std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

std::string repr(const Value& v) {
  if (v.is_string()) return repr_string(v.str());
  if (v.is_list()) {
    std::string out = v.tuple ? "(" : "[";
    bool first = true;
    for (const auto& x : v.list()) {
      if (!first) out += ", ";
      first = false;
      out += repr(x);
    }
    if (v.tuple && v.list().size() == 1) out += ",";
    return out + (v.tuple ? ")" : "]");
  }
  if (v.is_dict()) {
    if (v.dict().is_namespace) return "<Namespace>";
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.dict().items) {
      if (!first) out += ", ";
      first = false;
      out += repr_string(k) + ": " + repr(x);
    }
    return out + "}";
  }
  return to_str(v);
}

std::string to_str(const Value& v) {
  switch (v.v.index()) {
    case 0:
      return "";
    case 1:
      return "None";
    case 2:
      return v.as_bool() ? "True" : "False";
    case 3:
      return std::to_string(v.as_int());
    case 4:
      return format_float(v.as_float());
    case 5:
      return v.str();
    case 8:
      return "<function " + v.callable().name + ">";
    default:
      return repr(v);
  }
}

static void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, int indent, int depth, int line) {
  if (depth > 512) fail(Errc::invalid_argument, line, "tojson: value nested too deeply");
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  switch (v.v.index()) {
    case 1:
      out += "null";
      return;
    case 2:
      out += v.as_bool() ? "true" : "false";
      return;
    case 3:
      out += std::to_string(v.as_int());
      return;
    case 4: {
      const double d = v.as_float();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += format_float(d);
      return;
    }
    case 5:
      json_string(out, v.str());
      return;
    case 6: {
      const auto& l = v.list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_dump(out, l[i], indent, depth + 1, line);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case 7: {
      const auto& d = v.dict();
      if (d.is_namespace) fail(Errc::invalid_argument, line, "tojson: Namespace is not JSON serializable");
      if (d.items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_string(out, d.items[i].first);
        out += ": ";
        json_dump(out, d.items[i].second, indent, depth + 1, line);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    default:
      fail(Errc::invalid_argument, line,
           std::string("tojson: Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

std::string to_json(const Value& v, int indent, int line) {
  std::string out;
  json_dump(out, v, indent, 0, line);
  return out;
}

bool as_number(const Value& v, double& d) {
  if (v.is_int())
    d = static_cast<double>(v.as_int());
  else if (v.is_float())
    d = v.as_float();
  else if (v.is_bool())
    d = v.as_bool() ? 1.0 : 0.0;
  else
    return false;
  return true;
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

bool equal(const Value& a, const Value& b) {
  if (is_intlike(a) && is_intlike(b)) {
    const int64_t x = a.is_int() ? a.as_int() : a.as_bool();
    const int64_t y = b.is_int() ? b.as_int() : b.as_bool();
    return x == y;
  }
  double x = 0, y = 0;
  if (as_number(a, x) && as_number(b, y)) return x == y;
  if (a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0:
    case 1:
      return true;
    case 5:
      return a.str() == b.str();
    case 6: {
      const auto& l = a.list();
      const auto& r = b.list();
      if (l.size() != r.size()) return false;
      for (size_t i = 0; i < l.size(); ++i)
        if (!equal(l[i], r[i])) return false;
      return true;
    }
    case 7: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      const auto& l = a.dict();
      const auto& r = b.dict();
      if (l.is_namespace || r.is_namespace || l.items.size() != r.items.size()) return false;
      for (const auto& [k, v] : l.items) {
        const Value* o = r.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    default:
      return &a.callable() == &b.callable();
  }
}

template <class J>
static Value convert(const J& j, int depth) {
  if (depth > 512) fail(Errc::invalid_argument, 0, "context nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return None{};
    case nlohmann::json::value_t::boolean:
      return j.template get<bool>();
    case nlohmann::json::value_t::number_integer:
      return j.template get<int64_t>();
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return static_cast<double>(u);
      return static_cast<int64_t>(u);
    }
    case nlohmann::json::value_t::number_float:
      return j.template get<double>();
    case nlohmann::json::value_t::string:
      return j.template get<std::string>();
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(convert(x, depth + 1));
      return l;
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(it.key(), convert(it.value(), depth + 1));
      return Value(std::move(d));
    }
    default:
      return Undefined{};  // binary / discarded: not produced by parsing JSON text
  }
}

Value from_json(const nlohmann::json& j) { return convert(j, 0); }
Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

static size_t utf8_char_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += utf8_char_len(s, i)) out.push_back(i);
  out.push_back(s.size());
  return out;
}

size_t char_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8_char_len(s, i)) ++n;
  return n;
}

std::vector<std::string> chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_char_len(s, i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

static int32_t decode_one(std::string_view ch) {
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(ch.data()), static_cast<utf8proc_ssize_t>(ch.size()), &cp);
  return cp;
}

bool is_py_space(std::string_view ch) {
  if (ch.size() == 1) {
    const char c = ch[0];
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
  }
  const int32_t cp = decode_one(ch);
  if (cp < 0) return false;
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
      cp == 0x202F || cp == 0x205F || cp == 0x3000)
    return true;
  return false;
}

std::string py_strip(std::string_view s, bool left, bool right, const std::optional<std::string>& strip_chars) {
  const auto cs = chars(s);
  std::vector<std::string> set;
  if (strip_chars) set = chars(*strip_chars);
  const auto strip_it = [&](const std::string& c) {
    if (!strip_chars) return is_py_space(c);
    for (const auto& x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_it(cs[b])) ++b;
  if (right)
    while (e > b && strip_it(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

static std::string map_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (const auto& c : chars(s)) {
    const int32_t cp = decode_one(c);
    if (cp < 0) {
      out += c;
      continue;
    }
    const int32_t m = upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
    utf8proc_uint8_t buf[8];
    const auto n = utf8proc_encode_char(m, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

std::string py_upper(std::string s) { return map_case(s, true); }
std::string py_lower(std::string s) { return map_case(s, false); }

}  // namespace actord::jinja
