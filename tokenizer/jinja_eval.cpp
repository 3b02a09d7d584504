// Tree-walking evaluator of the chat template Jinja subset: statements, expressions, scopes, macros and the
// global functions (range, namespace, dict, raise_exception, strftime_now).
#include "tokenizer/jinja_eval.hpp"

#include <ctime>
#include <unordered_map>

namespace actord::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;

enum class Flow { normal, break_, continue_ };

constexpr int kMaxCallDepth = 100;
constexpr int64_t kMaxRange = 1'000'000;
constexpr size_t kMaxOutput = size_t{256} << 20;

int64_t int_arg(const Value& v, const char* what, int line) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  fail(Errc::invalid_argument, line, std::string(what) + ": expected an integer, got " + type_name(v));
}

Value global_range(CallArgs& a, int line) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
    fail(Errc::invalid_argument, line, "range() takes 1 to 3 positional arguments");
  int64_t start = 0, stop = 0, step = 1;
  if (a.pos.size() == 1) {
    stop = int_arg(a.pos[0], "range()", line);
  } else {
    start = int_arg(a.pos[0], "range()", line);
    stop = int_arg(a.pos[1], "range()", line);
    if (a.pos.size() == 3) step = int_arg(a.pos[2], "range()", line);
  }
  if (step == 0) fail(Errc::invalid_argument, line, "range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) fail(Errc::invalid_argument, line, "range() too large");
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // the next value is past any int64 stop
  }
  return out;
}

Value global_dict(CallArgs& a, int line, bool is_namespace) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = is_namespace;
  for (const auto& p : a.pos) {
    if (!p.is_dict()) fail(Errc::invalid_argument, line, "namespace()/dict(): positional argument must be a dict");
    for (const auto& [k, v] : p.dict().items) d->set(k, v);
  }
  for (const auto& [k, v] : a.kw) d->set(k, v);
  return Value(std::move(d));
}

Value global_raise(CallArgs& a, int line) {
  if (a.pos.size() != 1 || !a.kw.empty()) fail(Errc::invalid_argument, line, "raise_exception() takes one message");
  std::string msg = to_str(a.pos[0]);
  throw TemplateError{Errc::invalid_argument, 0, std::move(msg), true};
}

Value global_strftime(CallArgs& a, int line) {
  if (a.pos.size() != 1 || !a.pos[0].is_string())
    fail(Errc::invalid_argument, line, "strftime_now() takes one format string");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, a.pos[0].str().c_str(), &tm);
  return std::string(buf, n);
}

Value make_callable(std::string name, std::function<Value(CallArgs&, int)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(std::move(c));
}

class Interpreter {
 public:
  explicit Interpreter(const Value& context) {
    Frame globals;
    globals["range"] = make_callable("range", global_range);
    globals["namespace"] = make_callable("namespace", [](CallArgs& a, int l) { return global_dict(a, l, true); });
    globals["dict"] = make_callable("dict", [](CallArgs& a, int l) { return global_dict(a, l, false); });
    globals["raise_exception"] = make_callable("raise_exception", global_raise);
    globals["strftime_now"] = make_callable("strftime_now", global_strftime);
    frames_.push_back(std::move(globals));
    Frame top;
    if (context.is_dict())
      for (const auto& [k, v] : context.dict().items) top[k] = v;
    frames_.push_back(std::move(top));
  }

  std::string run(const Body& body) {
    std::string out;
    exec_body(body, out);
    return out;
  }

 private:
  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Undefined{name};
  }

  void assign(const std::vector<std::string>& names, const Value& v, int line) {
    if (names.size() == 1) {
      frames_.back()[names[0]] = v;
      return;
    }
    const auto items = iterate(v, line);
    if (items.size() != names.size())
      fail(Errc::invalid_argument, line,
           "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()));
    for (size_t i = 0; i < names.size(); ++i) frames_.back()[names[i]] = items[i];
  }

  Flow exec_body(const Body& body, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case StmtKind::text:
        out += s.text;
        break;
      case StmtKind::output:
        out += to_str(eval(*s.expr));
        break;
      case StmtKind::if_:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec_body(body, out);
        return exec_body(s.else_body, out);
      case StmtKind::for_:
        exec_for(s, out);
        break;
      case StmtKind::set:
        exec_set(s);
        break;
      case StmtKind::macro:
        define_macro(s);
        break;
      case StmtKind::break_:
        return Flow::break_;
      case StmtKind::continue_:
        return Flow::continue_;
      case StmtKind::block:
        return exec_body(s.body, out);
    }
    if (out.size() > kMaxOutput) fail(Errc::resource_exhausted, s.line, "rendered output too large");
    return Flow::normal;
  }

  // Whether `target` is v or is held, at any depth, by the lists and dicts of v (depth beyond kMaxCallDepth: said
  // yes, refused as a cycle would be).
  static bool reaches(const Value& v, const Dict* target, int depth) {
    if (depth > kMaxCallDepth) return true;
    if (v.is_dict()) {
      if (&v.dict() == target) return true;
      for (const auto& item : v.dict().items)
        if (reaches(item.second, target, depth + 1)) return true;
    } else if (v.is_list()) {
      for (const Value& item : v.list())
        if (reaches(item, target, depth + 1)) return true;
    }
    return false;
  }

  void exec_set(const Stmt& s) {
    if (!s.attr.empty()) {
      const Value ns = lookup(s.text);
      if (!ns.is_dict() || !ns.dict().is_namespace)
        fail(Errc::invalid_argument, s.line, "cannot assign attribute on non-namespace object '" + s.text + "'");
      Value value = eval(*s.expr);
      // Namespaces are the only mutable values: one stored into itself (directly or through lists and other
      // namespaces) would be a cycle of shared pointers that is never freed.
      if (reaches(value, &ns.dict(), 0))
        fail(Errc::invalid_argument, s.line, "cannot store namespace '" + s.text + "' inside itself");
      ns.dict_mut().set(s.attr, std::move(value));
      return;
    }
    if (s.expr) {
      assign(s.names, eval(*s.expr), s.line);
      return;
    }
    std::string captured;
    frames_.emplace_back();
    exec_body(s.body, captured);
    frames_.pop_back();
    assign(s.names, Value(std::move(captured)), s.line);
  }

  void exec_for(const Stmt& s, std::string& out) {
    std::vector<Value> items = iterate(eval(*s.expr), s.line);
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& item : items) {
        frames_.emplace_back();
        assign(s.names, item, s.line);
        const bool keep = truthy(eval(*s.cond));
        frames_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(s.else_body, out);
      return;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto loop = std::make_shared<Dict>();
      loop->items = {{"index", Value(i + 1)},
                     {"index0", Value(i)},
                     {"revindex", Value(n - i)},
                     {"revindex0", Value(n - i - 1)},
                     {"first", Value(i == 0)},
                     {"last", Value(i == n - 1)},
                     {"length", Value(n)},
                     {"depth", Value(1)},
                     {"depth0", Value(0)},
                     {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value(Undefined{"previtem"})},
                     {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value(Undefined{"nextitem"})}};
      loop->items.emplace_back("cycle", make_callable("cycle", [i](CallArgs& a, int line) -> Value {
                                 if (a.pos.empty()) fail(Errc::invalid_argument, line, "no items for cycling given");
                                 return a.pos[static_cast<size_t>(i) % a.pos.size()];
                               }));
      frames_.emplace_back();
      frames_.back()["loop"] = Value(std::move(loop));
      assign(s.names, items[static_cast<size_t>(i)], s.line);
      const Flow f = exec_body(s.body, out);
      frames_.pop_back();
      if (f == Flow::break_) break;
    }
  }

  void define_macro(const Stmt& s) {
    const Stmt* def = &s;
    frames_.back()[s.text] = make_callable(s.text, [this, def](CallArgs& a, int line) -> Value {
      if (++call_depth_ > kMaxCallDepth) fail(Errc::invalid_argument, line, "macro recursion too deep");
      if (a.pos.size() > def->params.size())
        fail(Errc::invalid_argument, line,
             "macro '" + def->text + "' takes " + std::to_string(def->params.size()) + " arguments");
      Frame frame;
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [pname, pdefault] = def->params[i];
        if (i < a.pos.size())
          frame[pname] = a.pos[i];
        else if (const Value* kv = a.kwarg(pname))
          frame[pname] = *kv;
        else if (pdefault)
          frame[pname] = eval(*pdefault);
        else
          frame[pname] = Undefined{pname};
      }
      for (const auto& [k, v] : a.kw) {
        bool known = false;
        for (const auto& p : def->params) known = known || p.first == k;
        if (!known)
          fail(Errc::invalid_argument, line, "macro '" + def->text + "' takes no keyword argument '" + k + "'");
      }
      frames_.push_back(std::move(frame));
      std::string out;
      exec_body(def->body, out);
      frames_.pop_back();
      --call_depth_;
      return Value(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.items.size(); ++i) {
      if (e.arg_names[i].empty())
        args.pos.push_back(eval(*e.items[i]));
      else
        args.kw.emplace_back(e.arg_names[i], eval(*e.items[i]));
    }
    return args;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::literal:
        return e.value;
      case ExprKind::name:
        return lookup(e.name);
      case ExprKind::list:
      case ExprKind::tuple: {
        List l;
        for (const auto& x : e.items) l.push_back(eval(*x));
        return e.kind == ExprKind::tuple ? make_tuple(std::move(l)) : Value(std::move(l));
      }
      case ExprKind::dict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i]);
          if (!k.is_string()) fail(Errc::unsupported, e.line, "dict keys other than strings are not supported");
          d->set(k.str(), eval(*e.items[i + 1]));
        }
        return Value(std::move(d));
      }
      case ExprKind::attr: {
        const Value obj = eval(*e.items[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        return get_attr(obj, e.name);
      }
      case ExprKind::subscript: {
        const Value obj = eval(*e.items[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        return get_item(obj, eval(*e.items[1]), e.line);
      }
      case ExprKind::slice: {
        const Value obj = eval(*e.items[0]);
        const auto part = [&](size_t i) { return e.items[i] ? eval(*e.items[i]) : Value(None{}); };
        return get_slice(obj, part(1), part(2), part(3), e.line);
      }
      case ExprKind::call:
        return eval_call(e);
      case ExprKind::filter: {
        const Value v = eval(*e.items[0]);
        CallArgs args = eval_args(e, 1);
        return apply_filter(e.name, v, args, e.line);
      }
      case ExprKind::test: {
        const Value v = eval(*e.items[0]);
        std::vector<Value> args;
        for (size_t i = 1; i < e.items.size(); ++i) args.push_back(eval(*e.items[i]));
        return apply_test(e.name, v, args, e.line) != e.negated;
      }
      case ExprKind::unary: {
        const Value v = eval(*e.items[0]);
        if (e.name == "not") return !truthy(v);
        if (v.is_undefined()) undefined_error(v, e.line);
        if (e.name == "+" && (v.is_number() || v.is_bool())) return v.is_bool() ? Value(int64_t{v.as_bool()}) : v;
        if (v.is_int()) {
          if (v.as_int() == INT64_MIN) fail(Errc::invalid_argument, e.line, "integer overflow in unary '-'");
          return Value(-v.as_int());
        }
        if (v.is_bool()) return Value(-int64_t{v.as_bool()});
        if (v.is_float()) return Value(-v.as_float());
        fail(Errc::invalid_argument, e.line,
             std::string("bad operand type for unary ") + e.name + ": '" + type_name(v) + "'");
      }
      case ExprKind::binary: {
        if (e.name == "and") {
          Value l = eval(*e.items[0]);
          return truthy(l) ? eval(*e.items[1]) : l;
        }
        if (e.name == "or") {
          Value l = eval(*e.items[0]);
          return truthy(l) ? l : eval(*e.items[1]);
        }
        return binary_op(e.name, eval(*e.items[0]), eval(*e.items[1]), e.line);
      }
      case ExprKind::compare: {
        Value left = eval(*e.items[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1]);
          if (!compare_op(e.ops[i], left, right, e.line)) return false;
          left = std::move(right);
        }
        return true;
      }
      case ExprKind::cond:
        if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
        return e.items[2] ? eval(*e.items[2]) : Value(Undefined{});
    }
    fail(Errc::internal, e.line, "unknown expression");
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.items[0];
    if (callee.kind == ExprKind::attr) {
      const Value obj = eval(*callee.items[0]);
      CallArgs args = eval_args(e, 1);
      if (obj.is_dict()) {
        const Value* member = obj.dict().find(callee.name);
        if (member && member->is_callable()) return member->callable().fn(args, e.line);
      }
      return call_method(obj, callee.name, args, e.line);
    }
    const Value fn = eval(callee);
    if (fn.is_undefined()) undefined_error(fn, e.line);
    if (!fn.is_callable())
      fail(Errc::invalid_argument, e.line, std::string("'") + type_name(fn) + "' object is not callable");
    CallArgs args = eval_args(e, 1);
    return fn.callable().fn(args, e.line);
  }

  std::vector<Frame> frames_;
  int call_depth_ = 0;
};

}  // namespace

std::string render_body(const Body& body, const Value& context) {
  Interpreter interp(context);
  return interp.run(body);
}

}  // namespace actord::jinja
