// JsonSchema: a response_format json_schema's schema (JSON Schema, the subset OpenAI's structured outputs use)
// compiled into the nodes JsonMatcher walks while a sequence generates: what value may come where.
//
// Contract: compile() takes the schema's JSON text and either returns the nodes or an invalid_argument error naming
// the keyword and where it is (`multipleOf (at /properties/age) is not supported; ...`). Supported: type (one or a
// list), properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum and const
// of strings, numbers, booleans and null, anyOf / oneOf whose alternatives begin differently (different JSON types,
// or literals with different first bytes) or are objects told apart by their first property (a tagged union: the
// same required property first in each, its values const / enum, no value in two of them), $ref to
// "#/$defs/..." or "#/definitions/..." (recursion included), a string's pattern (regex.hpp's syntax, matched whole,
// which also satisfies JSON Schema's search) or format (date, time, date-time, duration, email, hostname, ipv4,
// ipv6, uri, uuid: the regexes of format_pattern, a subset of each format's texts where its full rule is no regex:
// no leap seconds, no IPv4-embedded IPv6, hostnames of at most 8 labels of 30 characters, URIs with an authority
// and no user information), with minLength / maxLength too (Regex::with_length: a minimum of up to kMaxDfaStates
// (state, length) pairs, any maximum); a number's or an integer's minimum,
// maximum, exclusiveMinimum, exclusiveMaximum (number_range.hpp: whole bounds for numbers, which then take no
// exponent); a schema without type but with string keywords is a string, with bounds a number,
// boolean schemas of true; annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are ignored, every other keyword is refused. What is generated: an object's properties in
// the schema's order, each optional one present or not, no other keys (additionalProperties then only allows what
// is never generated); an object schema without properties takes any keys, their values of additionalProperties'
// schema (any value without one; none at all under additionalProperties false); strings' lengths count
// Unicode characters (an escape is one). The root must be an object or array schema, and one that admits a document
// nested at most kMaxNesting levels (a required property that always recurses admits none). The nodes are immutable:
// matchers of many sequences share them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "structured/regex.hpp"

namespace actord::structured {

struct SchemaNode {
  enum class Kind : uint8_t { any, object, array, string, number, integer, boolean, null, literals, alternatives };
  struct Property {
    std::string name;  // as written between the key's quotes (its JSON text, escapes included)
    int32_t node = 0;
    bool required = false;
  };
  Kind kind = Kind::any;
  std::vector<Property> properties;  // object, in generation order
  bool any_keys = false;             // object: no properties given, any keys
  int32_t values = 0;                // object with any keys: its values' node (additionalProperties; 0: kAny)
  int32_t items = 0;                 // array: the elements' node (JsonSchema::kAny: any value)
  uint32_t min_items = 0, max_items = UINT32_MAX;
  uint32_t min_length = 0, max_length = UINT32_MAX;  // string, in characters
  std::vector<std::string> literals;  // literals: each value's JSON text, compact
  std::vector<int32_t> alternatives;  // alternatives: nodes no two of which take the same first byte
  // object, a tagged union: the alternatives, by the index of the value of the one property (its tag, a literals
  // node) that each begins with; once the tag's value is read, the object goes on as that alternative.
  std::vector<int32_t> tags;
  // string: the regex its decoded text matches whole (pattern, format); number / integer: the regex its JSON text
  // matches whole (bounds). An index into JsonSchema::pattern; -1: none.
  int32_t pattern = -1;
};

class JsonSchema {
 public:
  static constexpr int32_t kAny = 0;   // node 0: any JSON value
  static constexpr int32_t kRoot = 1;  // node 1: the schema's root, an object or an array
  static constexpr size_t kMaxProperties = 64;
  static constexpr size_t kMaxLiterals = 64;
  static constexpr size_t kMaxNodes = 4096;
  static constexpr int kMaxDepth = 64;    // levels of JSON nesting in the schema's text
  static constexpr int kMaxNesting = 32;  // levels of objects and arrays in a document (JsonMatcher::kMaxDepth)

  static Result<std::shared_ptr<const JsonSchema>> compile(std::string_view schema_json);
  // The pattern a string of `format` matches, or nullptr for a format not supported.
  static const char* format_pattern(std::string_view format);
  // The bytes a string's regex never takes: the control characters JSON escapes only as \uXXXX.
  static const std::bitset<256>& unescaped_controls();
  // response_format json_object: any one JSON object.
  static const JsonSchema& any_object();

  const SchemaNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  const Regex& pattern(int32_t i) const { return patterns_[static_cast<size_t>(i)]; }
  // The node that a value beginning with byte `b` takes where node `n` is due (through alternatives), or -1.
  int32_t resolve(int32_t n, uint8_t b) const;
  // The fewest levels of objects and arrays a value of node `n` opens (its required properties and minItems
  // included); kMaxNesting + 1 when it cannot end within kMaxNesting (a required property that recurses).
  int min_nesting(int32_t n) const { return min_nesting_[static_cast<size_t>(n)]; }

 private:
  friend class SchemaCompiler;
  void compute_min_nesting();
  std::vector<SchemaNode> nodes_;
  std::vector<Regex> patterns_;
  std::vector<int> min_nesting_;
};

}  // namespace actord::structured
