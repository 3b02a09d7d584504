// Internal to the chat template engine: the tree-walking evaluator (jinja_eval.cpp) and the built-in
// filters, tests, methods and operators it uses (jinja_builtins.cpp). Everything throws TemplateError.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja_ast.hpp"
#include "tokenizer/jinja_value.hpp"

namespace actord::jinja {

// Renders `body` with `context` (a dict) as the template's variables.
std::string render_body(const Body& body, const Value& context);

[[noreturn]] void undefined_error(const Value& v, int line);
std::vector<Value> iterate(const Value& v, int line);
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key, int line);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);

Value binary_op(const std::string& op, const Value& a, const Value& b, int line);
bool compare_op(const std::string& op, const Value& a, const Value& b, int line);

Value apply_filter(const std::string& name, const Value& v, CallArgs& args, int line);
bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args, int line);
Value call_method(const Value& obj, const std::string& name, CallArgs& args, int line);

// Helpers shared by jinja_builtins.cpp and jinja_filters.cpp (as_number and is_intlike: jinja_value.hpp).
int64_t to_i(const Value& v);
const Value* arg(const CallArgs& a, size_t idx, std::string_view name);  // positional idx, else keyword name
std::string str_arg(const CallArgs& a, size_t idx, std::string_view name, const char* what, int line);
std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count);
std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string jinja_title(const std::string& s);
Value attr_path(const Value& item, const Value& attribute, int line);  // jinja2 make_attrgetter
int sort_compare(const Value& a, const Value& b, bool case_sensitive, int line);

}  // namespace actord::jinja
