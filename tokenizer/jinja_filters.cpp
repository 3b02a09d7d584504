// Filters of the chat template Jinja subset (jinja2 3.1 semantics; tojson as HF transformers overrides it:
// json.dumps(x, ensure_ascii=False, indent=indent), no HTML escaping, keys in insertion order).
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_eval.hpp"

namespace actord::jinja {
namespace {

bool bool_arg(const CallArgs& a, size_t idx, std::string_view name, bool def) {
  const Value* v = arg(a, idx, name);
  return v ? truthy(*v) : def;
}

Value opt_arg(const CallArgs& a, size_t idx, std::string_view name) {
  const Value* v = arg(a, idx, name);
  return v ? *v : Value(None{});
}

// A finite float as the int filter makes it, truncated toward zero; one beyond 64 bits is an error (Python's int has
// no bound, ours does).
Value float_to_int(double d, int line, const Value& otherwise) {
  if (!std::isfinite(d)) return otherwise;
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    fail(Errc::invalid_argument, line, "integer overflow in int");
  return static_cast<int64_t>(d);
}

// select / reject / selectattr / rejectattr.
Value select_items(const Value& v, const CallArgs& a, bool by_attr, bool keep_when, int line) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.pos.empty()) fail(Errc::invalid_argument, line, "selectattr/rejectattr need an attribute name");
    attribute = a.pos[next++];
  }
  std::string test;
  if (next < a.pos.size()) {
    if (!a.pos[next].is_string()) fail(Errc::invalid_argument, line, "select: test name must be a string");
    test = a.pos[next++].str();
  }
  const std::vector<Value> test_args(a.pos.begin() + static_cast<std::ptrdiff_t>(next), a.pos.end());
  List out;
  for (const auto& item : iterate(v, line)) {
    const Value x = by_attr ? attr_path(item, attribute, line) : item;
    const bool pass = test.empty() ? truthy(x) : apply_test(test, x, test_args, line);
    if (pass == keep_when) out.push_back(item);
  }
  return out;
}

Value min_max(const Value& v, const CallArgs& a, bool want_max, int line) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value attribute = opt_arg(a, 1, "attribute");
  const auto items = iterate(v, line);
  if (items.empty()) return Undefined{want_max ? "max" : "min"};
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const Value x = attribute.is_none() ? items[i] : attr_path(items[i], attribute, line);
    const Value y = attribute.is_none() ? items[best] : attr_path(items[best], attribute, line);
    const int c = sort_compare(x, y, cs, line);
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

std::string do_indent(const std::string& s, const Value& width, bool first, bool blank, int line) {
  const int64_t spaces = width.is_string() ? 0 : std::max<int64_t>(0, to_i(width));
  // As repetition: no more than 64 MiB of spaces (a width of 10^16 asked for as many bytes).
  if (spaces > (int64_t{64} << 20)) fail(Errc::invalid_argument, line, "indent width too large");
  const std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(spaces), ' ');
  const auto lines = py_splitlines(s + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  return first ? ind + rv : rv;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a, int line) {
  if (name == "safe") return v;
  if (name == "default" || name == "d") {
    const Value def = a.pos.empty() && !a.kwarg("default_value") ? Value("") : opt_arg(a, 0, "default_value");
    const bool boolean = bool_arg(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) return def;
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return static_cast<int64_t>(char_length(v.str()));
    if (v.is_list()) return static_cast<int64_t>(v.list().size());
    if (v.is_dict() && !v.dict().is_namespace) return static_cast<int64_t>(v.dict().items.size());
    if (v.is_undefined()) return int64_t{0};
    fail(Errc::invalid_argument, line, std::string("object of type '") + type_name(v) + "' has no len()");
  }
  if (name == "trim") {
    const Value c = opt_arg(a, 0, "chars");
    return py_strip(to_str(v), true, true, c.is_none() ? std::nullopt : std::optional<std::string>(to_str(c)));
  }
  if (name == "upper") return py_upper(to_str(v));
  if (name == "lower") return py_lower(to_str(v));
  if (name == "title") return jinja_title(to_str(v));
  if (name == "capitalize") return py_capitalize(to_str(v));
  if (name == "string") return to_str(v);
  if (name == "replace") {
    const Value cnt = opt_arg(a, 2, "count");
    return py_replace(to_str(v), str_arg(a, 0, "old", "replace", line), str_arg(a, 1, "new", "replace", line),
                      is_intlike(cnt) ? to_i(cnt) : -1);
  }
  if (name == "first" || name == "last") {
    const auto items = iterate(v, line);
    if (items.empty()) return Undefined{name};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return List(iterate(v, line));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cs = chars(v.str());
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return out;
    }
    auto items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return List(std::move(items));
  }
  if (name == "join") {
    const Value sep = opt_arg(a, 0, "d");
    const Value attribute = opt_arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v, line)) {
      if (!first) out += sep.is_none() ? "" : to_str(sep);
      first = false;
      out += to_str(attribute.is_none() ? x : attr_path(x, attribute, line));
    }
    return out;
  }
  if (name == "tojson") {
    for (const auto& [k, x] : a.kw)
      if (k != "indent") fail(Errc::unsupported, line, "tojson argument '" + k + "' is not supported");
    const Value indent = opt_arg(a, 0, "indent");
    if (!indent.is_none() && !is_intlike(indent)) fail(Errc::unsupported, line, "tojson indent must be an integer");
    return to_json(v, indent.is_none() ? -1 : static_cast<int>(std::clamp<int64_t>(to_i(indent), 0, 64)), line);
  }
  if (name == "items") {
    if (v.is_undefined()) return List{};
    if (!v.is_dict() || v.dict().is_namespace) fail(Errc::invalid_argument, line, "items: expected a mapping");
    List out;
    for (const auto& [k, x] : v.dict().items) out.push_back(make_tuple(List{Value(k), x}));
    return out;
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail(Errc::invalid_argument, line, "dictsort: expected a mapping");
    const bool cs = bool_arg(a, 0, "case_sensitive", false);
    const Value by = opt_arg(a, 1, "by");
    const bool by_value = by.is_string() && by.str() == "value";
    const bool rev = bool_arg(a, 2, "reverse", false);
    List out;
    for (const auto& [k, x] : v.dict().items) out.push_back(make_tuple(List{Value(k), x}));
    std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
      const int c = sort_compare(p.list()[by_value ? 1 : 0], q.list()[by_value ? 1 : 0], cs, line);
      return rev ? c > 0 : c < 0;
    });
    return out;
  }
  if (name == "int") {
    const Value def = a.pos.empty() && !a.kwarg("default") ? Value(int64_t{0}) : opt_arg(a, 0, "default");
    if (v.is_int()) return v;
    if (v.is_bool()) return to_i(v);
    if (v.is_float()) return float_to_int(v.as_float(), line, def);
    if (v.is_string()) {
      const std::string s = py_strip(v.str(), true, true, std::nullopt);
      std::optional<double> d;
      try {
        size_t used = 0;
        const long long i = std::stoll(s, &used, 10);
        if (used == s.size()) return static_cast<int64_t>(i);
        const double f = std::stod(s, &used);
        if (used == s.size()) d = f;
      } catch (...) {
      }
      if (d) return float_to_int(*d, line, def);
    }
    return def;
  }
  if (name == "float") {
    const Value def = a.pos.empty() && !a.kwarg("default") ? Value(0.0) : opt_arg(a, 0, "default");
    double d = 0;
    if (as_number(v, d)) return d;
    if (v.is_string()) {
      const std::string s = py_strip(v.str(), true, true, std::nullopt);
      try {
        size_t used = 0;
        d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (...) {
      }
    }
    return def;
  }
  if (name == "abs") {
    if (v.is_int() && v.as_int() == INT64_MIN) fail(Errc::invalid_argument, line, "integer overflow in abs()");
    if (v.is_int()) return v.as_int() < 0 ? -v.as_int() : v.as_int();
    if (v.is_bool()) return to_i(v);
    if (v.is_float()) return std::fabs(v.as_float());
    fail(Errc::invalid_argument, line, std::string("bad operand type for abs(): '") + type_name(v) + "'");
  }
  if (name == "round") {
    double d = 0;
    if (!as_number(v, d)) fail(Errc::invalid_argument, line, "round: expected a number");
    const Value prec = opt_arg(a, 0, "precision");
    const Value method = opt_arg(a, 1, "method");
    const double scale = std::pow(10.0, static_cast<double>(is_intlike(prec) ? to_i(prec) : 0));
    const std::string m = method.is_string() ? method.str() : "common";
    double r = d * scale;
    if (m == "common")
      r = std::nearbyint(r);
    else if (m == "ceil")
      r = std::ceil(r);
    else if (m == "floor")
      r = std::floor(r);
    else
      fail(Errc::invalid_argument, line, "round: method must be common, ceil or floor");
    return r / scale;
  }
  if (name == "select" || name == "reject") return select_items(v, a, false, name == "select", line);
  if (name == "selectattr" || name == "rejectattr") return select_items(v, a, true, name == "selectattr", line);
  if (name == "map") {
    List out;
    if (const Value* attribute = a.kwarg("attribute")) {
      const Value* def = a.kwarg("default");
      for (const auto& x : iterate(v, line)) {
        Value y = attr_path(x, *attribute, line);
        out.push_back(y.is_undefined() && def ? *def : y);
      }
      return out;
    }
    if (a.pos.empty() || !a.pos[0].is_string()) fail(Errc::invalid_argument, line, "map: expected a filter name");
    const std::string filter = a.pos[0].str();
    if (filter == "map" ||
        !(filter == "upper" || filter == "lower" || filter == "trim" || filter == "string" || filter == "int" ||
          filter == "float" || filter == "length" || filter == "tojson" || filter == "title" ||
          filter == "capitalize" || filter == "first" || filter == "last" || filter == "default" || filter == "d" ||
          filter == "replace" || filter == "list" || filter == "abs" || filter == "round" || filter == "join" ||
          filter == "items" || filter == "safe" || filter == "reverse" || filter == "count"))
      fail(Errc::unsupported, line, "filter '" + filter + "' is not supported");
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const auto& x : iterate(v, line)) {
      CallArgs copy = rest;
      out.push_back(apply_filter(filter, x, copy, line));
    }
    return out;
  }
  if (name == "unique") {
    const bool cs = bool_arg(a, 0, "case_sensitive", false);
    const Value attribute = opt_arg(a, 1, "attribute");
    List out;
    std::vector<Value> seen;
    for (const auto& x : iterate(v, line)) {
      Value key = attribute.is_none() ? x : attr_path(x, attribute, line);
      if (key.is_string() && !cs) key = py_lower(key.str());
      bool dup = false;
      for (const auto& s : seen) dup = dup || equal(s, key);
      if (dup) continue;
      seen.push_back(key);
      out.push_back(x);
    }
    return out;
  }
  if (name == "sort") {
    const bool rev = bool_arg(a, 0, "reverse", false);
    const bool cs = bool_arg(a, 1, "case_sensitive", false);
    const Value attribute = opt_arg(a, 2, "attribute");
    auto items = iterate(v, line);
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      const Value x = attribute.is_none() ? p : attr_path(p, attribute, line);
      const Value y = attribute.is_none() ? q : attr_path(q, attribute, line);
      const int c = sort_compare(x, y, cs, line);
      return rev ? c > 0 : c < 0;
    });
    return List(std::move(items));
  }
  if (name == "sum") {
    const Value attribute = opt_arg(a, 0, "attribute");
    Value total = a.kwarg("start") ? *a.kwarg("start") : (a.pos.size() > 1 ? a.pos[1] : Value(int64_t{0}));
    for (const auto& x : iterate(v, line))
      total = binary_op("+", total, attribute.is_none() ? x : attr_path(x, attribute, line), line);
    return total;
  }
  if (name == "min" || name == "max") return min_max(v, a, name == "max", line);
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (const auto& c : chars(to_str(v))) {
      const bool w = c.size() > 1 || (c[0] >= '0' && c[0] <= '9') || (c[0] >= 'a' && c[0] <= 'z') ||
                     (c[0] >= 'A' && c[0] <= 'Z') || c[0] == '_';
      if (w && !in_word) ++n;
      in_word = w;
    }
    return n;
  }
  if (name == "indent") {
    const Value width = a.pos.empty() && !a.kwarg("width") ? Value(int64_t{4}) : opt_arg(a, 0, "width");
    if (!width.is_string() && !is_intlike(width))
      fail(Errc::invalid_argument, line, "indent: width must be int or str");
    return do_indent(to_str(v), width, bool_arg(a, 1, "first", false), bool_arg(a, 2, "blank", false), line);
  }
  fail(Errc::unsupported, line, "filter '" + name + "' is not supported");
}

}  // namespace actord::jinja
