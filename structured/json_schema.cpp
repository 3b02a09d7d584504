#include "structured/json_schema.hpp"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "structured/number_range.hpp"

namespace actord::structured {

namespace {

using ojson = nlohmann::ordered_json;
using Kind = SchemaNode::Kind;

bool value_start(uint8_t b) {
  return b == '{' || b == '[' || b == '"' || b == 't' || b == 'f' || b == 'n' || b == '-' || (b >= '0' && b <= '9');
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k{"type",     "properties", "required", "additionalProperties", "items",
                                       "minItems", "maxItems",   "minLength", "maxLength", "enum", "const",
                                       "anyOf",    "oneOf",      "$ref",     "$defs",     "definitions",
                                       "pattern",  "format",     "minimum",  "maximum",   "exclusiveMinimum",
                                       "exclusiveMaximum"};
  return k;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a{"title",   "description", "default",    "examples", "$schema",
                                       "$id",     "$comment",    "deprecated", "readOnly", "writeOnly"};
  return a;
}

std::string keyword_list() {
  std::string out;
  for (const std::string& k : supported_keywords()) out += (out.empty() ? "" : ", ") + k;
  return out;
}

struct Refused {
  std::string message;
};

}  // namespace

// Builds a JsonSchema's nodes from its JSON; throws Refused with the message compile() returns.
class SchemaCompiler {
 public:
  explicit SchemaCompiler(const ojson& root) : root_(root) {}

  std::shared_ptr<JsonSchema> run() {
    auto schema = std::make_shared<JsonSchema>();
    out_ = schema.get();
    out_->nodes_.push_back(SchemaNode{});  // kAny
    out_->nodes_.emplace_back();           // kRoot, filled below
    SchemaNode root = build(root_, "");
    if (root.kind == Kind::any) {
      root.kind = Kind::object;
      root.any_keys = true;
    }
    if (root.kind != Kind::object && root.kind != Kind::array)
      refuse("", "the root must be an object or array schema (type object or array)");
    out_->nodes_[JsonSchema::kRoot] = std::move(root);
    out_->compute_min_nesting();
    if (out_->min_nesting(JsonSchema::kRoot) > JsonSchema::kMaxNesting)
      refuse("", "the schema admits no document nested at most " + std::to_string(JsonSchema::kMaxNesting) +
                     " levels deep (its required properties or items recurse)");
    return schema;
  }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    throw Refused{what + (path.empty() ? "" : " (at " + path + ")")};
  }

  int32_t add(SchemaNode node) {
    if (out_->nodes_.size() >= JsonSchema::kMaxNodes)
      refuse("", "the schema has more than " + std::to_string(JsonSchema::kMaxNodes) + " parts");
    out_->nodes_.push_back(std::move(node));
    return static_cast<int32_t>(out_->nodes_.size() - 1);
  }

  int32_t compile(const ojson& s, const std::string& path) {
    if (s.is_object() && s.contains("$ref")) return reference(s, path);
    SchemaNode node = build(s, path);
    if (node.kind == Kind::any) return JsonSchema::kAny;
    return add(std::move(node));
  }

  // "$ref": "#/$defs/Name" (or #/definitions/Name), alone beside annotations; each target compiled once, its node
  // reserved first so that a recursive reference finds it.
  int32_t reference(const ojson& s, const std::string& path) {
    for (const auto& [key, value] : s.items())
      if (key != "$ref" && !annotations().count(key)) refuse(path, "$ref must stand alone, beside " + key);
    if (!s["$ref"].is_string()) refuse(path + "/$ref", "$ref must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (auto done = refs_.find(ref); done != refs_.end()) return done->second;
    const ojson* target = nullptr;
    for (const char* section : {"$defs", "definitions"}) {
      const std::string prefix = std::string("#/") + section + "/";
      if (ref.rfind(prefix, 0) == 0 && root_.is_object() && root_.contains(section) && root_[section].is_object() &&
          root_[section].contains(ref.substr(prefix.size())))
        target = &root_[section][ref.substr(prefix.size())];
    }
    if (!target)
      refuse(path + "/$ref", "$ref " + ref + " does not name a schema under #/$defs or #/definitions");
    // While the target is built, a recursive reference to it sees a node of the target's type (enough for
    // alternatives to tell it apart), or of any type when that is not one plain type.
    SchemaNode placeholder;
    if (target->is_object() && target->contains("type") && (*target)["type"].is_string())
      placeholder = typed(ojson::object(), (*target)["type"].get<std::string>(), ref.substr(1));
    const int32_t slot = add(std::move(placeholder));
    refs_[ref] = slot;
    pending_.insert(slot);
    SchemaNode node = build(*target, ref.substr(1));
    pending_.erase(slot);
    out_->nodes_[static_cast<size_t>(slot)] = std::move(node);
    return slot;
  }

  // The names of s's "type": one, or a non-empty list (empty when s has none).
  static std::vector<std::string> type_names(const ojson& s, const std::string& path) {
    std::vector<std::string> types;
    if (!s.contains("type")) return types;
    const ojson& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const ojson& e : t) {
        if (!e.is_string()) refuse(path + "/type", "type must be a string or a list of strings");
        types.push_back(e.get<std::string>());
      }
    } else {
      refuse(path + "/type", "type must be a string or a non-empty list of strings");
    }
    return types;
  }

  static uint32_t count(const ojson& s, const char* key, const std::string& path) {
    const ojson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > UINT32_MAX)
      refuse(path + "/" + key, std::string(key) + " must be a non-negative integer");
    return static_cast<uint32_t>(v.get<int64_t>());
  }

  SchemaNode build(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "a schema of false admits no value");
      return SchemaNode{};
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or true");
    for (const auto& [key, value] : s.items()) {
      if (!supported_keywords().count(key) && !annotations().count(key))
        refuse(path, key + " is not supported; supported: " + keyword_list());
    }
    if (s.contains("$ref")) return out_->nodes_[static_cast<size_t>(reference(s, path))];
    // enum / const and anyOf / oneOf stand beside annotations and definitions only (enum / const beside type too),
    // so that no keyword next to them goes unenforced.
    auto alone = [&](const char* what, std::initializer_list<const char*> also) {
      for (const auto& item : s.items()) {
        const std::string& key = item.key();
        if (annotations().count(key) || key == "$defs" || key == "definitions") continue;
        if (std::any_of(also.begin(), also.end(), [&](const char* a) { return key == a; })) continue;
        refuse(path, std::string(what) + " beside " + key + " is not supported");
      }
    };
    if (s.contains("enum") || s.contains("const")) {
      alone(s.contains("enum") ? "enum" : "const", {"enum", "const", "type"});
      return literals(s, path);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      alone(s.contains("anyOf") ? "anyOf" : "oneOf", {"anyOf", "oneOf"});
      const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
      if (s.contains("anyOf") && s.contains("oneOf")) refuse(path, "anyOf beside oneOf is not supported");
      const ojson& list = s[key];
      if (!list.is_array() || list.empty()) refuse(path + "/" + key, std::string(key) + " must be a non-empty array");
      std::vector<int32_t> members;
      for (size_t i = 0; i < list.size(); ++i)
        members.push_back(compile(list[i], path + "/" + key + "/" + std::to_string(i)));
      // Beside number, integer alternatives are dropped (number writes them): under oneOf an integer would then
      // match two alternatives.
      if (std::string(key) == "oneOf" && has_kind(members, Kind::integer) && has_kind(members, Kind::number))
        refuse(path + "/oneOf", "an integer and a number alternative under oneOf are not supported (an integer "
                                "matches both)");
      return alternatives(members, path + "/" + key);
    }
    std::vector<std::string> types = type_names(s, path);
    auto has_any = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (types.empty() && s.contains("properties")) types.push_back("object");
    if (types.empty() && s.contains("items")) types.push_back("array");
    if (types.empty() && has_any({"pattern", "format", "minLength", "maxLength"})) types.push_back("string");
    if (types.empty() && has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types.push_back("number");
    if (types.empty()) return SchemaNode{};
    if (types.size() == 1) return typed(s, types[0], path);
    std::vector<int32_t> members;
    for (const std::string& t : types) members.push_back(add(typed(s, t, path)));
    return alternatives(members, path + "/type");
  }

  SchemaNode typed(const ojson& s, const std::string& type, const std::string& path) {
    SchemaNode n;
    if (type == "object") {
      n.kind = Kind::object;
      if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() &&
          !s["additionalProperties"].is_object())
        refuse(path + "/additionalProperties", "additionalProperties must be a boolean or a schema");
      if (!s.contains("properties")) {
        if (s.contains("required") && !s["required"].empty())
          refuse(path + "/required", "required names properties, and there are none");
        // Any keys (a dict), their values of additionalProperties' schema; with additionalProperties false, none.
        const bool closed = s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
                            !s["additionalProperties"].get<bool>();
        n.any_keys = !closed;
        if (s.contains("additionalProperties") && s["additionalProperties"].is_object())
          n.values = compile(s["additionalProperties"], path + "/additionalProperties");
        return n;
      }
      const ojson& props = s["properties"];
      if (!props.is_object()) refuse(path + "/properties", "properties must be an object");
      if (props.size() > JsonSchema::kMaxProperties)
        refuse(path + "/properties", "more than " + std::to_string(JsonSchema::kMaxProperties) + " properties");
      for (const auto& [name, sub] : props.items()) {
        const std::string text = ojson(name).dump();
        n.properties.push_back({text.substr(1, text.size() - 2), compile(sub, path + "/properties/" + name), false});
      }
      if (s.contains("required")) {
        const ojson& req = s["required"];
        if (!req.is_array()) refuse(path + "/required", "required must be an array of property names");
        for (const ojson& r : req) {
          if (!r.is_string()) refuse(path + "/required", "required must be an array of property names");
          const std::string text = ojson(r).dump();
          auto it = std::find_if(n.properties.begin(), n.properties.end(), [&](const SchemaNode::Property& p) {
            return p.name == text.substr(1, text.size() - 2);
          });
          if (it == n.properties.end())
            refuse(path + "/required", "required names " + text + ", which is not among the properties");
          it->required = true;
        }
      }
    } else if (type == "array") {
      n.kind = Kind::array;
      if (s.contains("items")) {
        if (s["items"].is_boolean() && !s["items"].get<bool>()) n.max_items = 0;
        else n.items = compile(s["items"], path + "/items");
      }
      if (s.contains("minItems")) n.min_items = count(s, "minItems", path);
      if (s.contains("maxItems")) n.max_items = std::min(n.max_items, count(s, "maxItems", path));
      if (n.min_items > n.max_items) refuse(path, "minItems is larger than maxItems");
    } else if (type == "string") {
      n.kind = Kind::string;
      if (s.contains("minLength")) n.min_length = count(s, "minLength", path);
      if (s.contains("maxLength")) n.max_length = count(s, "maxLength", path);
      if (n.min_length > n.max_length) refuse(path, "minLength is larger than maxLength");
      string_pattern(s, path, n);
    } else if (type == "number" || type == "integer") {
      n.kind = type == "number" ? Kind::number : Kind::integer;
      number_bounds(s, path, n);
    } else if (type == "boolean") {
      n.kind = Kind::boolean;
    } else if (type == "null") {
      n.kind = Kind::null;
    } else {
      refuse(path + "/type", "unknown type " + ojson(type).dump());
    }
    return n;
  }

  int32_t add_pattern(std::string_view regex, const std::bitset<256>& never, const std::string& path,
                      const char* key) {
    auto compiled = Regex::compile(regex, never);
    if (!compiled) refuse(path + "/" + key, std::string(key) + ": " + compiled.error().message);
    out_->patterns_.push_back(std::move(*compiled));
    return static_cast<int32_t>(out_->patterns_.size() - 1);
  }

  // pattern or format: the regex the string's decoded text matches whole.
  void string_pattern(const ojson& s, const std::string& path, SchemaNode& n) {
    if (!s.contains("pattern") && !s.contains("format")) return;
    const char* key = s.contains("pattern") ? "pattern" : "format";
    if (s.contains("pattern") && s.contains("format")) refuse(path, "pattern beside format is not supported");
    if (!s[key].is_string()) refuse(path + "/" + key, std::string(key) + " must be a string");
    const std::string text = s[key].get<std::string>();
    std::string_view regex = text;
    if (s.contains("format")) {
      const char* format = JsonSchema::format_pattern(text);
      if (!format)
        refuse(path + "/format", "format " + ojson(text).dump() +
                                     " is not supported; supported: date, date-time, duration, email, hostname, "
                                     "ipv4, ipv6, time, uri, uuid");
      regex = format;
    }
    n.pattern = add_pattern(regex, JsonSchema::unescaped_controls(), path, key);
    if (n.min_length == 0 && n.max_length == UINT32_MAX) return;
    // minLength / maxLength: the regex's texts of those lengths (Regex::with_length).
    Regex& re = out_->patterns_[static_cast<size_t>(n.pattern)];
    auto bounded = re.with_length(n.min_length, n.max_length);
    if (!bounded)
      refuse(path, std::string(key) + " with " + (s.contains("minLength") ? "minLength" : "maxLength") + ": " +
                       bounded.error().message);
    re = std::move(*bounded);
  }

  // minimum, maximum, exclusiveMinimum, exclusiveMaximum: the regex of the number's JSON text.
  void number_bounds(const ojson& s, const std::string& path, SchemaNode& n) {
    auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key)) return std::nullopt;
      if (!s[key].is_number()) refuse(path + "/" + key, std::string(key) + " must be a number");
      return s[key].get<double>();
    };
    NumberBounds b;
    const auto min = bound("minimum"), exclusive_min = bound("exclusiveMinimum");
    const auto max = bound("maximum"), exclusive_max = bound("exclusiveMaximum");
    b.exclusive_minimum = exclusive_min && (!min || *exclusive_min >= *min);  // the tighter of the two
    b.minimum = b.exclusive_minimum ? exclusive_min : min;
    b.exclusive_maximum = exclusive_max && (!max || *exclusive_max <= *max);
    b.maximum = b.exclusive_maximum ? exclusive_max : max;
    if (!b.minimum && !b.maximum) return;
    auto regex = number_range_pattern(b, n.kind == Kind::integer);
    if (!regex) refuse(path, regex.error().message);
    n.pattern = add_pattern(*regex, {}, path, b.minimum ? "minimum" : "maximum");
  }

  SchemaNode literals(const ojson& s, const std::string& path) {
    if (s.contains("enum") && s.contains("const")) refuse(path, "enum beside const is not supported");
    const char* key = s.contains("enum") ? "enum" : "const";
    std::vector<ojson> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) refuse(path + "/enum", "enum must be a non-empty array");
      values.assign(s["enum"].begin(), s["enum"].end());
    } else {
      values.push_back(s["const"]);
    }
    if (values.size() > JsonSchema::kMaxLiterals)
      refuse(path + "/" + key, "more than " + std::to_string(JsonSchema::kMaxLiterals) + " values");
    // Beside type: the values of its type(s) only.
    const std::vector<std::string> types = type_names(s, path);
    auto of_type = [&](const ojson& v) {
      const bool whole = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                   std::floor(v.get<double>()) == v.get<double>());
      return types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) {
               return (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
                      (t == "integer" && whole) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
             });
    };
    SchemaNode n;
    n.kind = Kind::literals;
    for (const ojson& v : values) {
      if (v.is_object() || v.is_array())
        refuse(path + "/" + key, std::string(key) + " values must be strings, numbers, booleans or null");
      if (!of_type(v)) continue;
      std::string text = v.dump();
      if (std::find(n.literals.begin(), n.literals.end(), text) == n.literals.end())
        n.literals.push_back(std::move(text));
    }
    if (n.literals.empty()) refuse(path + "/" + key, std::string("no ") + key + " value is of the type beside it");
    return n;
  }

  std::bitset<256> first_bytes(int32_t n) const {
    std::bitset<256> set;
    for (int b = 0; b < 256; ++b) set[static_cast<size_t>(b)] = out_->resolve(n, static_cast<uint8_t>(b)) >= 0;
    return set;
  }

  // Whether any of the nodes, or of their alternatives, is of kind k.
  bool has_kind(const std::vector<int32_t>& nodes, Kind k) const {
    return std::any_of(nodes.begin(), nodes.end(), [&](int32_t m) {
      const SchemaNode& n = out_->node(m);
      return n.kind == k || (n.kind == Kind::alternatives && has_kind(n.alternatives, k));
    });
  }

  // Alternatives told apart by their first byte: nested ones flattened, integer dropped beside number, any value
  // when one of them is; two that may begin with the same byte are refused.
  SchemaNode alternatives(const std::vector<int32_t>& members, const std::string& path) {
    std::vector<int32_t> flat;
    for (int32_t m : members) {
      const SchemaNode& node = out_->node(m);
      if (pending_.count(m) && node.kind == Kind::any)
        refuse(path, "a recursive $ref among alternatives needs a target with one type");
      if (node.kind == Kind::any) return SchemaNode{};
      if (node.kind == Kind::alternatives) flat.insert(flat.end(), node.alternatives.begin(), node.alternatives.end());
      else flat.push_back(m);
    }
    auto of_kind = [&](Kind k) { return [this, k](int32_t m) { return out_->node(m).kind == k; }; };
    if (std::any_of(flat.begin(), flat.end(), of_kind(Kind::number)))
      flat.erase(std::remove_if(flat.begin(), flat.end(), of_kind(Kind::integer)), flat.end());
    if (std::count_if(flat.begin(), flat.end(), of_kind(Kind::object)) > 1) {  // one tagged union in their place
      std::vector<int32_t> objects;
      for (int32_t m : flat)
        if (out_->node(m).kind == Kind::object) objects.push_back(m);
      const int32_t tagged = tagged_union(objects, path);
      flat.erase(std::remove_if(flat.begin(), flat.end(), of_kind(Kind::object)), flat.end());
      flat.push_back(tagged);
    }
    if (flat.size() == 1 && !pending_.count(flat[0])) return out_->node(flat[0]);  // (a pending one is not built yet)
    for (size_t i = 0; i < flat.size(); ++i) {
      for (size_t j = i + 1; j < flat.size(); ++j) {
        const std::bitset<256> both = first_bytes(flat[i]) & first_bytes(flat[j]);
        if (both.any()) {
          int b = 0;
          while (!both[static_cast<size_t>(b)]) ++b;
          refuse(path, "alternatives " + std::to_string(i) + " and " + std::to_string(j) + " can both begin with '" +
                           std::string(1, static_cast<char>(b)) +
                           "': only alternatives that begin differently (different JSON types) are supported");
        }
      }
    }
    SchemaNode n;
    n.kind = Kind::alternatives;
    n.alternatives = std::move(flat);
    return n;
  }

  // Objects among alternatives, told apart by their first property: in each the same name, required, its value a
  // const / enum (a literals node), no value in two of them. One object node takes their place: its one property is
  // the tag, over every alternative's values, and `tags` says which alternative each value goes on as.
  int32_t tagged_union(const std::vector<int32_t>& objects, const std::string& path) {
    const std::string rule =
        ": objects among alternatives must each begin with the same required property, whose const or enum values "
        "(no value in two of them) tell them apart";
    SchemaNode tag;
    tag.kind = Kind::literals;
    std::vector<int32_t> tags;
    std::string name;
    for (size_t i = 0; i < objects.size(); ++i) {
      if (pending_.count(objects[i])) refuse(path, "a recursive $ref among alternatives of objects" + rule);
      const SchemaNode& o = out_->node(objects[i]);
      const std::string which = "alternative " + std::to_string(i) + " of the objects";
      if (o.any_keys || o.properties.empty() || !o.properties[0].required)
        refuse(path, which + " has no required first property" + rule);
      if (i == 0) name = o.properties[0].name;
      if (o.properties[0].name != name)
        refuse(path, which + " begins with \"" + o.properties[0].name + "\", not \"" + name + "\"" + rule);
      const SchemaNode& values = out_->node(o.properties[0].node);
      if (values.kind != Kind::literals) refuse(path, which + "'s \"" + name + "\" is not a const or enum" + rule);
      for (size_t k = 0; k < values.literals.size(); ++k) {  // (a tagged union among them: its alternatives)
        const std::string& v = values.literals[k];
        if (std::find(tag.literals.begin(), tag.literals.end(), v) != tag.literals.end())
          refuse(path, "the value " + v + " of \"" + name + "\" is in two alternatives" + rule);
        tag.literals.push_back(v);
        tags.push_back(o.tags.empty() ? objects[i] : o.tags[k]);
      }
    }
    if (tag.literals.size() > JsonSchema::kMaxLiterals)
      refuse(path, "more than " + std::to_string(JsonSchema::kMaxLiterals) + " values of \"" + name + "\" in all");
    SchemaNode u;
    u.kind = Kind::object;
    u.properties.push_back({name, add(std::move(tag)), true});
    u.tags = std::move(tags);
    return add(std::move(u));
  }

  const ojson& root_;
  JsonSchema* out_ = nullptr;
  std::map<std::string, int32_t> refs_;
  std::set<int32_t> pending_;  // references whose target is being built
};

Result<std::shared_ptr<const JsonSchema>> JsonSchema::compile(std::string_view schema_json) {
  // Nesting is bounded while parsing: compiling recurses once per level.
  struct TooDeep {};
  ojson parsed;
  try {
    parsed = ojson::parse(schema_json, [](int depth, ojson::parse_event_t, ojson&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    return make_error(Errc::invalid_argument, "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
  } catch (const ojson::exception& e) {
    return make_error(Errc::invalid_argument, std::string("the schema is not valid JSON: ") + e.what());
  }
  try {
    return std::shared_ptr<const JsonSchema>(SchemaCompiler(parsed).run());
  } catch (const Refused& r) {
    return make_error(Errc::invalid_argument, r.message);
  }
}

const JsonSchema& JsonSchema::any_object() {
  static const JsonSchema schema = [] {
    JsonSchema s;
    s.nodes_.resize(2);
    s.nodes_[kRoot].kind = Kind::object;
    s.nodes_[kRoot].any_keys = true;
    s.compute_min_nesting();
    return s;
  }();
  return schema;
}

// A fixed point from "cannot end" down: each pass lowers a node to what its parts allow, until none changes (at most
// kMaxNesting + 1 passes: every change lowers a value that starts at kMaxNesting + 1).
void JsonSchema::compute_min_nesting() {
  constexpr int kNever = kMaxNesting + 1;
  min_nesting_.assign(nodes_.size(), kNever);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const SchemaNode& n = nodes_[i];
      int m = 0;
      switch (n.kind) {
        case Kind::object:
          m = 1;
          for (const SchemaNode::Property& p : n.properties)
            if (p.required) m = std::max(m, 1 + min_nesting_[static_cast<size_t>(p.node)]);
          if (!n.tags.empty()) {  // a tagged union: as its shallowest alternative
            m = kNever;
            for (int32_t t : n.tags) m = std::min(m, min_nesting_[static_cast<size_t>(t)]);
          }
          break;
        case Kind::array:
          m = n.min_items > 0 ? 1 + min_nesting_[static_cast<size_t>(n.items)] : 1;
          break;
        case Kind::alternatives:
          m = kNever;
          for (int32_t a : n.alternatives) m = std::min(m, min_nesting_[static_cast<size_t>(a)]);
          break;
        default:
          m = 0;  // a scalar (any value: null)
      }
      m = std::min(m, kNever);
      if (m < min_nesting_[i]) {
        min_nesting_[i] = m;
        changed = true;
      }
    }
  }
}

int32_t JsonSchema::resolve(int32_t n, uint8_t b) const {
  const SchemaNode& node = nodes_[static_cast<size_t>(n)];
  switch (node.kind) {
    case Kind::any: return value_start(b) ? n : -1;
    case Kind::object: return b == '{' ? n : -1;
    case Kind::array: return b == '[' ? n : -1;
    case Kind::string: return b == '"' ? n : -1;
    case Kind::number:
    case Kind::integer:
      if (node.pattern >= 0) return pattern(node.pattern).next(0, b) != Regex::kDead ? n : -1;
      return b == '-' || (b >= '0' && b <= '9') ? n : -1;
    case Kind::boolean: return b == 't' || b == 'f' ? n : -1;
    case Kind::null: return b == 'n' ? n : -1;
    case Kind::literals:
      for (const std::string& l : node.literals)
        if (static_cast<uint8_t>(l[0]) == b) return n;
      return -1;
    case Kind::alternatives:
      for (int32_t m : node.alternatives)
        if (int32_t r = resolve(m, b); r >= 0) return r;
      return -1;
  }
  return -1;
}

const std::bitset<256>& JsonSchema::unescaped_controls() {
  static const std::bitset<256> controls = [] {
    std::bitset<256> set;
    for (size_t b = 0; b < 0x20; ++b) set[b] = true;
    for (const size_t b : {0x08, 0x09, 0x0A, 0x0C, 0x0D}) set[b] = false;  // \b \t \n \f \r
    return set;
  }();
  return controls;
}

const char* JsonSchema::format_pattern(std::string_view format) {
  // RFC 3339 full-date: years 0001-9999, each month's days, February 29 in leap years only.
#define ACTORD_YEAR R"((?:\d{3}[1-9]|\d{2}[1-9]\d|\d[1-9]\d{2}|[1-9]\d{3}))"
#define ACTORD_LEAP_YEAR R"((?:\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00))"
#define ACTORD_DATE                                                                                     \
  "(?:" ACTORD_YEAR R"(-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|)" \
  R"(02-(?:0[1-9]|1\d|2[0-8]))|)" ACTORD_LEAP_YEAR "-02-29)"
  // RFC 3339 full-time (no leap second): hours, minutes, seconds, a fraction, Z or an offset.
#define ACTORD_TIME R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))"
#define ACTORD_HEX4 "[0-9a-fA-F]{1,4}"
#define ACTORD_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define ACTORD_PCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
#define ACTORD_SHORT_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,28}[A-Za-z0-9])?"
  static const std::pair<std::string_view, const char*> kFormats[] = {
      {"date", ACTORD_DATE},
      {"time", ACTORD_TIME},
      {"date-time", ACTORD_DATE "T" ACTORD_TIME},
      // ISO 8601 durations as JSON Schema's appendix A writes them: weeks alone, or a date part, a time part or both,
      // each of units in order without gaps (Y [M [D]], H [M [S]]), each of at most 9 digits.
      {"duration", R"(P(?:\d{1,9}W|(?:\d{1,9}Y(?:\d{1,9}M(?:\d{1,9}D)?)?|\d{1,9}M(?:\d{1,9}D)?|\d{1,9}D)(?:T(?:\d{1,9}H(?:\d{1,9}M(?:\d{1,9}S)?)?|\d{1,9}M(?:\d{1,9}S)?|\d{1,9}S))?|T(?:\d{1,9}H(?:\d{1,9}M(?:\d{1,9}S)?)?|\d{1,9}M(?:\d{1,9}S)?|\d{1,9}S)))"},
      // Dot-atoms at a domain of labels, ending in a letters-only top-level label.
      {"email", R"([A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*@(?:)" ACTORD_LABEL R"(\.)+[A-Za-z]{2,63})"},
      // RFC 1123 labels, at most 8 of at most 30 characters: within its 253 characters whatever the count.
      {"hostname", ACTORD_SHORT_LABEL R"((?:\.)" ACTORD_SHORT_LABEL "){0,7}"},
      {"ipv4", R"((?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
      // Eight groups, or fewer around one "::" (no embedded IPv4).
      {"ipv6", "(?:(?:" ACTORD_HEX4 ":){7}" ACTORD_HEX4 "|(?:" ACTORD_HEX4 ":){1,7}:|(?:" ACTORD_HEX4 ":){1,6}:" ACTORD_HEX4
               "|(?:" ACTORD_HEX4 ":){1,5}(?::" ACTORD_HEX4 "){1,2}|(?:" ACTORD_HEX4 ":){1,4}(?::" ACTORD_HEX4
               "){1,3}|(?:" ACTORD_HEX4 ":){1,3}(?::" ACTORD_HEX4 "){1,4}|(?:" ACTORD_HEX4 ":){1,2}(?::" ACTORD_HEX4
               "){1,5}|" ACTORD_HEX4 ":(?::" ACTORD_HEX4 "){1,6}|:(?:(?::" ACTORD_HEX4 "){1,7}|:))"},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      // RFC 3986 URIs with an authority (scheme://host[:port]/path?query#fragment; no user information, no IP
      // literals), percent-escapes in the path, query and fragment.
      {"uri", "[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9._~!$&'()*+,;=-]*(?::[0-9]*)?(?:/" ACTORD_PCHAR "*)*(?:\\?(?:"
              ACTORD_PCHAR "|[/?])*)?(?:#(?:" ACTORD_PCHAR "|[/?])*)?"},
  };
#undef ACTORD_YEAR
#undef ACTORD_LEAP_YEAR
#undef ACTORD_DATE
#undef ACTORD_TIME
#undef ACTORD_HEX4
#undef ACTORD_LABEL
#undef ACTORD_SHORT_LABEL
#undef ACTORD_PCHAR
  for (const auto& [name, regex] : kFormats)
    if (name == format) return regex;
  return nullptr;
}

}  // namespace actord::structured
