// Built-ins of the chat template Jinja subset: operators, attribute / item / slice access, filters, tests and
// the str / dict / list methods, following jinja2 3.1 and Python semantics (HF transformers' environment).
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_eval.hpp"

namespace actord::jinja {

void undefined_error(const Value& v, int line) {
  const auto& name = std::get<Undefined>(v.v).name;
  fail(Errc::invalid_argument, line, name.empty() ? "value is undefined" : "'" + name + "' is undefined");
}

int64_t to_i(const Value& v) { return v.is_int() ? v.as_int() : int64_t{v.as_bool()}; }

[[noreturn]] static void type_error(const std::string& op, const Value& a, const Value& b, int line) {
  if (a.is_undefined()) undefined_error(a, line);
  if (b.is_undefined()) undefined_error(b, line);
  fail(Errc::invalid_argument, line,
       "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Python-style index normalization for slices.
static void slice_indices(int64_t len, const Value& start, const Value& stop, const Value& step, int line, int64_t& b,
                          int64_t& e, int64_t& st) {
  st = step.is_none() ? 1
                      : (is_intlike(step) ? to_i(step)
                                          : (fail(Errc::invalid_argument, line, "slice indices must be integers"), 1));
  if (st == 0) fail(Errc::invalid_argument, line, "slice step cannot be zero");
  const auto norm = [&](const Value& v, int64_t def) -> int64_t {
    if (v.is_none()) return def;
    if (!is_intlike(v)) fail(Errc::invalid_argument, line, "slice indices must be integers");
    int64_t x = to_i(v);
    if (x < 0) x += len;
    if (st > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  b = norm(start, st > 0 ? 0 : len - 1);
  e = norm(stop, st > 0 ? len : -1);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (old.empty()) {
    const auto cs = chars(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (i < cs.size()) out += cs[i];
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    const auto cs = chars(s);
    size_t i = 0;
    while (true) {
      while (i < cs.size() && is_py_space(cs[i])) ++i;
      if (i >= cs.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        std::string rest;
        for (size_t k = i; k < cs.size(); ++k) rest += cs[k];
        out.push_back(py_strip(rest, false, true, std::nullopt));
        break;
      }
      std::string word;
      while (i < cs.size() && !is_py_space(cs[i])) word += cs[i++];
      out.push_back(std::move(word));
    }
    return out;
  }
  const std::string& d = sep->str();
  if (d.empty()) fail(Errc::invalid_argument, 0, "empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  const auto cs = chars(s);
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string& c = cs[i];
    const bool brk = c == "\n" || c == "\r" || c == "\v" || c == "\f" || c == "\x1c" || c == "\x1d" || c == "\x1e" ||
                     c == "\xc2\x85" || c == "\xe2\x80\xa8" || c == "\xe2\x80\xa9";
    if (!brk) {
      cur += c;
      continue;
    }
    if (c == "\r" && i + 1 < cs.size() && cs[i + 1] == "\n") ++i;
    out.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

static bool is_alpha_ch(const std::string& c) {
  return c.size() > 1 || (c[0] >= 'a' && c[0] <= 'z') || (c[0] >= 'A' && c[0] <= 'Z');
}

// Python str.title(): a cased character after an uncased one is upper-cased, the others lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (const auto& c : chars(s)) {
    const std::string up = py_upper(c), low = py_lower(c);
    const bool cased = up != low;
    out += cased ? (prev_cased ? low : up) : c;
    prev_cased = cased;
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  const auto cs = chars(s);
  std::string out;
  for (size_t i = 0; i < cs.size(); ++i) out += i == 0 ? py_upper(cs[i]) : py_lower(cs[i]);
  return out;
}

// jinja2's title filter: split before runs of [-\s({[<], capitalize the first character of each piece.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool at_start = true;
  for (const auto& c : chars(s)) {
    const bool sep = c == "-" || c == "(" || c == "{" || c == "[" || c == "<" || is_py_space(c);
    if (sep) {
      out += c;
      at_start = true;
    } else {
      out += at_start ? py_upper(c) : py_lower(c);
      at_start = false;
    }
  }
  return out;
}

const Value* arg(const CallArgs& a, size_t idx, std::string_view name) {
  if (idx < a.pos.size()) return &a.pos[idx];
  return a.kwarg(name);
}

std::string str_arg(const CallArgs& a, size_t idx, std::string_view name, const char* what, int line) {
  const Value* v = arg(a, idx, name);
  if (!v || !v->is_string())
    fail(Errc::invalid_argument, line, std::string(what) + ": argument '" + std::string(name) + "' must be a string");
  return v->str();
}

// Attribute lookup that follows dotted paths ("a.b") and integer parts, like jinja2's make_attrgetter.
Value attr_path(const Value& item, const Value& attribute, int line) {
  if (is_intlike(attribute)) return get_item(item, attribute, line);
  Value cur = item;
  const std::string path = to_str(attribute);
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (cur.is_undefined()) return cur;
    const bool digits = !part.empty() && part.size() < 18 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur =
        digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))), line) : get_item(cur, Value(part), line);
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

int sort_compare(const Value& a, const Value& b, bool case_sensitive, int line) {
  if (a.is_string() && b.is_string() && !case_sensitive) {
    const std::string x = py_lower(a.str()), y = py_lower(b.str());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (compare_op("<", a, b, line)) return -1;
  if (compare_op("<", b, a, line)) return 1;
  return 0;
}

std::vector<Value> iterate(const Value& v, int line) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return {};
  if (v.is_dict() && !v.dict().is_namespace) {
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().items) out.emplace_back(k);
    return out;
  }
  if (v.is_string()) {
    std::vector<Value> out;
    for (auto& c : chars(v.str())) out.emplace_back(std::move(c));
    return out;
  }
  fail(Errc::invalid_argument, line, std::string("'") + type_name(v) + "' object is not iterable");
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return Undefined{name};
}

Value get_item(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) undefined_error(obj, line);
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict().find(key.str())) return *v;
      return Undefined{key.str()};
    }
    return Undefined{to_str(key)};
  }
  if ((obj.is_list() || obj.is_string()) && is_intlike(key)) {
    int64_t i = to_i(key);
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Undefined{to_str(key)};
      return obj.list()[static_cast<size_t>(i)];
    }
    const auto cs = chars(obj.str());
    const auto n = static_cast<int64_t>(cs.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Undefined{to_str(key)};
    return cs[static_cast<size_t>(i)];
  }
  return Undefined{key.is_string() ? key.str() : to_str(key)};
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line) {
  if (obj.is_undefined()) undefined_error(obj, line);
  if (!obj.is_list() && !obj.is_string())
    fail(Errc::invalid_argument, line, std::string("'") + type_name(obj) + "' object is not subscriptable");
  std::vector<std::string> cs;
  if (obj.is_string()) cs = chars(obj.str());
  const auto len = static_cast<int64_t>(obj.is_list() ? obj.list().size() : cs.size());
  int64_t b = 0, e = 0, st = 1;
  slice_indices(len, start, stop, step, line, b, e, st);
  if (obj.is_list()) {
    List out;
    for (int64_t i = b; st > 0 ? i < e : i > e;) {
      out.push_back(obj.list()[static_cast<size_t>(i)]);
      if (__builtin_add_overflow(i, st, &i)) break;  // a step past int64 leaves the slice
    }
    return out;
  }
  std::string out;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    out += cs[static_cast<size_t>(i)];
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  return out;
}

Value binary_op(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return to_str(a) + to_str(b);
  // Template integers are 64-bit (Python's have no bound): a result beyond that is an error, never a wrap-around.
  // `r` by reference: the overflow builtin in the same call writes it (argument order is unspecified).
  const auto checked = [&](bool overflowed, const int64_t& r) -> Value {
    if (overflowed) fail(Errc::invalid_argument, line, "integer overflow in '" + op + "'");
    return r;
  };
  int64_t r = 0;
  double x = 0, y = 0;
  const bool nums = as_number(a, x) && as_number(b, y);
  const bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) return checked(__builtin_add_overflow(to_i(a), to_i(b), &r), r);
    if (nums) return x + y;
    if (a.is_string() && b.is_string()) return a.str() + b.str();
    if (a.is_list() && b.is_list()) {
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return l;
    }
    type_error(op, a, b, line);
  }
  if (op == "-") {
    if (ints) return checked(__builtin_sub_overflow(to_i(a), to_i(b), &r), r);
    if (nums) return x - y;
    type_error(op, a, b, line);
  }
  if (op == "*") {
    if (ints) return checked(__builtin_mul_overflow(to_i(a), to_i(b), &r), r);
    if (nums) return x * y;
    const Value* seq = a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && is_intlike(*cnt)) {
      const int64_t n = std::max<int64_t>(0, to_i(*cnt));
      const size_t unit = seq->is_string() ? seq->str().size() : seq->list().size();
      size_t total = 0;
      if (__builtin_mul_overflow(unit, static_cast<size_t>(n), &total) || total > (size_t{64} << 20))
        fail(Errc::invalid_argument, line, "repetition too large");
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->str();
        return out;
      }
      List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->list().begin(), seq->list().end());
      return out;
    }
    type_error(op, a, b, line);
  }
  if (op == "/" || op == "//" || op == "%") {
    if (a.is_string() && op == "%") fail(Errc::unsupported, line, "string formatting with '%' is not supported");
    if (!nums) type_error(op, a, b, line);
    if (y == 0) fail(Errc::invalid_argument, line, "division by zero");
    if (op == "/") return x / y;
    if (ints) {
      const int64_t p = to_i(a), q = to_i(b);
      if (q == -1) return op == "//" ? checked(__builtin_sub_overflow(int64_t{0}, p, &r), r) : Value(int64_t{0});
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) {
        --d;
        m += q;
      }
      return op == "//" ? d : m;
    }
    if (op == "//") return std::floor(x / y);
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return m;
  }
  if (op == "**") {
    if (ints && to_i(b) >= 0) {
      const int64_t base = to_i(a), exp = to_i(b);
      if (base == 0 || base == 1) return exp == 0 ? int64_t{1} : base;
      if (base == -1) return exp % 2 == 0 ? int64_t{1} : int64_t{-1};
      r = 1;  // |base| >= 2 overflows within 63 steps
      for (int64_t i = 0; i < exp; ++i) checked(__builtin_mul_overflow(r, base, &r), r);
      return r;
    }
    if (nums) return std::pow(x, y);
    type_error(op, a, b, line);
  }
  fail(Errc::internal, line, "unknown operator " + op);
}

bool compare_op(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        fail(Errc::invalid_argument, line,
             std::string("'in <string>' requires string as left operand, not ") + type_name(a));
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_list()) {
      for (const auto& x : b.list()) found = found || equal(a, x);
    } else if (b.is_dict()) {
      found = a.is_string() && b.dict().find(a.str()) != nullptr;
    } else if (!b.is_undefined()) {
      fail(Errc::invalid_argument, line, std::string("argument of type '") + type_name(b) + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  int c = 0;
  double x = 0, y = 0;
  if (as_number(a, x) && as_number(b, y)) {
    c = x < y ? -1 : (x > y ? 1 : 0);
  } else if (a.is_string() && b.is_string()) {
    c = a.str().compare(b.str());
  } else if (a.is_list() && b.is_list()) {
    const auto& l = a.list();
    const auto& r = b.list();
    size_t i = 0;
    while (i < l.size() && i < r.size() && equal(l[i], r[i])) ++i;
    if (i < l.size() && i < r.size())
      c = compare_op("<", l[i], r[i], line) ? -1 : 1;
    else
      c = l.size() < r.size() ? -1 : (l.size() > r.size() ? 1 : 0);
  } else {
    if (a.is_undefined()) undefined_error(a, line);
    if (b.is_undefined()) undefined_error(b, line);
    fail(Errc::invalid_argument, line,
         "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
  }
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args, int line) {
  const auto need = [&](size_t n) {
    if (args.size() < n) fail(Errc::invalid_argument, line, "test '" + name + "' needs an argument");
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dict().is_namespace;
  if (name == "iterable")
    return v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.dict().is_namespace);
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.dict().is_namespace);
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && py_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && py_upper(v.str()) == v.str();
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!is_intlike(v)) fail(Errc::invalid_argument, line, "test '" + name + "' needs an integer");
    if (name == "even") return to_i(v) % 2 == 0;
    if (name == "odd") return to_i(v) % 2 != 0;
    need(1);
    if (!is_intlike(args[0]) || to_i(args[0]) == 0) fail(Errc::invalid_argument, line, "divisibleby: bad divisor");
    return to_i(v) % to_i(args[0]) == 0;
  }
  need(1);
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, args[0]);
  if (name == "ne" || name == "!=") return !equal(v, args[0]);
  if (name == "lt" || name == "<") return compare_op("<", v, args[0], line);
  if (name == "gt" || name == ">") return compare_op(">", v, args[0], line);
  if (name == "le" || name == "<=") return compare_op("<=", v, args[0], line);
  if (name == "ge" || name == ">=") return compare_op(">=", v, args[0], line);
  if (name == "in") return compare_op("in", v, args[0], line);
  fail(Errc::unsupported, line, "test '" + name + "' is not supported");
}

Value call_method(const Value& obj, const std::string& name, CallArgs& a, int line) {
  if (obj.is_undefined()) undefined_error(obj, line);
  const auto bad = [&]() -> Value {
    fail(Errc::invalid_argument, line, std::string("'") + type_name(obj) + "' object has no attribute '" + name + "'");
  };
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* c = arg(a, 0, "chars");
      std::optional<std::string> cs;
      if (c && !c->is_none()) cs = to_str(*c);
      return py_strip(s, name != "rstrip", name != "lstrip", cs);
    }
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(a, 0, "prefix");
      if (!p) fail(Errc::invalid_argument, line, name + "() takes at least 1 argument");
      std::vector<Value> cands = p->is_list() ? p->list() : std::vector<Value>{*p};
      for (const auto& c : cands) {
        if (!c.is_string()) fail(Errc::invalid_argument, line, name + "() argument must be str");
        const std::string& x = c.str();
        if (x.size() <= s.size() &&
            (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
          return true;
      }
      return false;
    }
    if (name == "split" || name == "rsplit") {
      const Value* sep = arg(a, 0, "sep");
      const Value* mx = arg(a, 1, "maxsplit");
      const int64_t maxsplit = mx && is_intlike(*mx) ? to_i(*mx) : -1;
      if (sep && !sep->is_none() && !sep->is_string()) fail(Errc::invalid_argument, line, "split(): sep must be str");
      if (name == "rsplit" && maxsplit >= 0) fail(Errc::unsupported, line, "rsplit with maxsplit is not supported");
      List out;
      for (auto& p : py_split(s, sep, maxsplit)) out.emplace_back(std::move(p));
      return out;
    }
    if (name == "upper") return py_upper(s);
    if (name == "lower") return py_lower(s);
    if (name == "title") return py_title(s);
    if (name == "capitalize") return py_capitalize(s);
    if (name == "replace") {
      const Value* cnt = arg(a, 2, "count");
      return py_replace(s, str_arg(a, 0, "old", "replace()", line), str_arg(a, 1, "new", "replace()", line),
                        cnt && is_intlike(*cnt) ? to_i(*cnt) : -1);
    }
    if (name == "join") {
      const Value* it = arg(a, 0, "iterable");
      if (!it) fail(Errc::invalid_argument, line, "join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(*it, line)) {
        if (!x.is_string())
          fail(Errc::invalid_argument, line, std::string("join(): expected str, got ") + type_name(x));
        if (!first) out += s;
        first = false;
        out += x.str();
      }
      return out;
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      const std::string sub = str_arg(a, 0, "sub", name.c_str(), line);
      if (name == "count") {
        if (sub.empty()) return static_cast<int64_t>(char_length(s) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return n;
      }
      const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") fail(Errc::invalid_argument, line, "substring not found");
        return int64_t{-1};
      }
      return static_cast<int64_t>(char_length(std::string_view(s).substr(0, p)));
    }
    if (name == "splitlines") {
      List out;
      for (auto& l : py_splitlines(s)) out.emplace_back(std::move(l));
      return out;
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
      const auto cs = chars(s);
      if (cs.empty()) return false;
      for (const auto& c : cs) {
        const bool d = c.size() == 1 && c[0] >= '0' && c[0] <= '9';
        const bool ok = name == "isdigit"   ? d
                        : name == "isalpha" ? is_alpha_ch(c)
                        : name == "isalnum" ? d || is_alpha_ch(c)
                                            : is_py_space(c);
        if (!ok) return false;
      }
      return true;
    }
    if (name == "isupper" || name == "islower") {
      const bool want_upper = name == "isupper";
      bool any_cased = false;
      for (const auto& c : chars(s)) {
        const std::string up = py_upper(c), low = py_lower(c);
        if (up == low) continue;
        any_cased = true;
        if (want_upper ? c != up : c != low) return false;
      }
      return any_cased;
    }
    return bad();
  }
  if (obj.is_dict() && !obj.dict().is_namespace) {
    const Dict& d = obj.dict();
    if (name == "get") {
      const Value* k = arg(a, 0, "key");
      if (!k) fail(Errc::invalid_argument, line, "get() takes at least 1 argument");
      const Value* def = arg(a, 1, "default");
      if (k->is_string())
        if (const Value* v = d.find(k->str())) return *v;
      return def ? *def : Value(None{});
    }
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : d.items) {
        if (name == "items")
          out.push_back(make_tuple(List{Value(k), v}));
        else if (name == "keys")
          out.emplace_back(k);
        else
          out.push_back(v);
      }
      return out;
    }
    return bad();
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") {
      const Value* x = arg(a, 0, "value");
      if (!x) fail(Errc::invalid_argument, line, name + "() takes exactly one argument");
      int64_t n = 0;
      const auto& l = obj.list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (!equal(l[i], *x)) continue;
        if (name == "index") return static_cast<int64_t>(i);
        ++n;
      }
      if (name == "index") fail(Errc::invalid_argument, line, "value is not in list");
      return n;
    }
  }
  return bad();
}

}  // namespace actord::jinja
