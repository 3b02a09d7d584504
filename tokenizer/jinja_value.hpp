// Internal to the chat template engine (namespace actord::jinja): the runtime value of the Jinja subset, its
// Python-style string forms (str(), repr(), json.dumps) and the UTF-8 helpers that Python's code-point
// semantics need (len, slicing, strip).
//
// Evaluation errors are thrown as jinja::TemplateError and caught at the ChatTemplate boundary; nothing
// outside tokenizer/ sees an exception.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.hpp"

namespace actord::jinja {

// Thrown by the lexer, parser and evaluator; turned into an Error by ChatTemplate.
struct TemplateError {
  Errc code = Errc::invalid_argument;
  int line = 0;         // 0: no line (raise_exception, errors without a location)
  std::string message;  // without the "chat_template line N: " prefix
  bool raw = false;     // raise_exception: report the message as is
};

[[noreturn]] void fail(Errc code, int line, std::string message);

struct Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

struct Value {
  using Var = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
                           std::shared_ptr<Dict>, std::shared_ptr<Callable>>;
  Var v;
  bool tuple = false;  // a list that prints as a Python tuple: tuple literals, items() pairs

  Value() : v(Undefined{}) {}
  Value(None n) : v(n) {}                                     // NOLINT
  Value(Undefined u) : v(std::move(u)) {}                     // NOLINT
  Value(bool b) : v(b) {}                                     // NOLINT
  Value(int64_t i) : v(i) {}                                  // NOLINT
  Value(int i) : v(static_cast<int64_t>(i)) {}                // NOLINT
  Value(double d) : v(d) {}                                   // NOLINT
  Value(std::string s) : v(std::move(s)) {}                   // NOLINT
  Value(const char* s) : v(std::string(s)) {}                 // NOLINT
  Value(List l) : v(std::make_shared<List>(std::move(l))) {}  // NOLINT
  Value(std::shared_ptr<Dict> d) : v(std::move(d)) {}         // NOLINT
  Value(std::shared_ptr<Callable> c) : v(std::move(c)) {}     // NOLINT

  bool is_undefined() const { return v.index() == 0; }
  bool is_none() const { return v.index() == 1; }
  bool is_bool() const { return v.index() == 2; }
  bool is_int() const { return v.index() == 3; }
  bool is_float() const { return v.index() == 4; }
  bool is_number() const { return is_int() || is_float(); }  // bool excluded, like jinja2's `number` test
  bool is_string() const { return v.index() == 5; }
  bool is_list() const { return v.index() == 6; }
  bool is_dict() const { return v.index() == 7; }
  bool is_callable() const { return v.index() == 8; }

  bool as_bool() const { return std::get<bool>(v); }
  int64_t as_int() const { return std::get<int64_t>(v); }
  double as_float() const { return std::get<double>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const List& list() const { return *std::get<std::shared_ptr<List>>(v); }
  const Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v); }
  Dict& dict_mut() const { return *std::get<std::shared_ptr<Dict>>(v); }
  const std::shared_ptr<Dict>& dict_ptr() const { return std::get<std::shared_ptr<Dict>>(v); }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v); }
};

// Ordered (insertion order, like a Python dict). Keys are strings: JSON objects and the templates in use
// only have string keys. A namespace() object is a Dict with is_namespace set; it is the only mutable value.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* kwarg(std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&, int line)> fn;
};

Value make_dict();
Value make_tuple(List items);

// Python type name, for error messages ("str", "int", "list", ...).
const char* type_name(const Value& v);
bool truthy(const Value& v);
// str(v): what {{ v }} prints (undefined -> "", None -> "None", lists and dicts in Python repr).
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string format_float(double d);  // Python repr of a float
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: no indent); fails on undefined/callables.
std::string to_json(const Value& v, int indent, int line);
// Python ==.
bool equal(const Value& a, const Value& b);
bool as_number(const Value& v, double& d);  // int, float or bool as a double; false for anything else
bool is_intlike(const Value& v);            // int or bool

Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

// UTF-8 helpers: character (code point) boundaries; invalid bytes count as one character each.
std::vector<size_t> char_offsets(std::string_view s);  // start offset of each character, plus s.size()
size_t char_length(std::string_view s);
std::vector<std::string> chars(std::string_view s);
bool is_py_space(std::string_view ch);  // str.isspace() for one UTF-8 character
std::string py_strip(std::string_view s, bool left, bool right, const std::optional<std::string>& chars);
std::string py_upper(std::string s);
std::string py_lower(std::string s);

}  // namespace actord::jinja
