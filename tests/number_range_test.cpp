// structured/number_range: the regex of a number's or an integer's bounds matches exactly the JSON texts within
// them. Every combination of bounds from -12 to 12 (each inclusive, exclusive or absent, whole and half values for
// integers) is checked against every text of a grid: integers from -130 to 130 and decimals with fractions; the
// schema test checks the documents against the jsonschema package too.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "structured/number_range.hpp"
#include "structured/regex.hpp"

using namespace actord::structured;

namespace {

bool full_match(const Regex& re, const std::string& text) {
  RegexMatcher m(re);
  for (const char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

bool within(double v, const NumberBounds& b) {
  if (b.minimum && (b.exclusive_minimum ? v <= *b.minimum : v < *b.minimum)) return false;
  if (b.maximum && (b.exclusive_maximum ? v >= *b.maximum : v > *b.maximum)) return false;
  return true;
}

// The texts tried: integers, and (for numbers) decimals with 1-3 fraction digits, trailing zeros included.
std::vector<std::string> grid(bool integer) {
  std::vector<std::string> texts;
  for (int i = -130; i <= 130; ++i) {
    texts.push_back(std::to_string(i));
    if (integer) continue;
    const std::string sign = i < 0 ? "-" : "";
    const std::string whole = std::to_string(std::abs(i));
    for (const char* fraction : {".0", ".5", ".25", ".000", ".001", ".999", ".50"}) texts.push_back(sign + whole + fraction);
    if (i == 0)
      for (const char* fraction : {".5", ".001", ".0"}) texts.push_back(std::string("-0") + fraction);
  }
  return texts;
}

}  // namespace

TEST_CASE("number range: every bound combination matches exactly the grid's texts within it", "[structured][json_schema]") {
  std::vector<std::optional<double>> bounds{std::nullopt};
  for (int v = -12; v <= 12; v += 3) bounds.push_back(v);
  bounds.push_back(0.0);
  int checked = 0;
  for (const bool integer : {true, false}) {
    std::vector<std::optional<double>> values = bounds;
    if (integer) values.insert(values.end(), {-2.5, 0.5, 3.5});
    const std::vector<std::string> texts = grid(integer);
    for (const auto& lo : values) {
      for (const auto& hi : values) {
        for (const int exclusive : {0, 1, 2, 3}) {
          NumberBounds b{lo, hi, (exclusive & 1) != 0, (exclusive & 2) != 0};
          if ((!lo && b.exclusive_minimum) || (!hi && b.exclusive_maximum)) continue;
          INFO((integer ? "integer" : "number") << " [" << (lo ? std::to_string(*lo) : "-") << ", "
                                                << (hi ? std::to_string(*hi) : "-") << "] exclusive " << exclusive);
          auto pattern = number_range_pattern(b, integer);
          bool any = false;
          for (const std::string& t : texts) any = any || within(std::stod(t), b);
          if (!pattern) {  // only a range with no number in it is refused
            INFO(pattern.error().message);
            CHECK_THAT(pattern.error().message, Catch::StartsWith("no "));
            CHECK_FALSE(any);
            continue;
          }
          INFO(*pattern);
          auto re = Regex::compile(*pattern);
          REQUIRE(re.ok());
          for (const std::string& t : texts) {
            // -0 and -0.x forms are never written for a zero; a negative fraction is.
            const bool negative_zero = t.rfind("-0", 0) == 0 && std::stod(t) == 0.0;
            INFO(t);
            CHECK(full_match(*re, t) == (within(std::stod(t), b) && !negative_zero));
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("number range: the open side reaches 15 digits, no exponent, no leading zeros, and bad bounds are refused",
          "[structured][json_schema]") {
  auto re = Regex::compile(*number_range_pattern({0.0, std::nullopt, false, false}, true));
  REQUIRE(re.ok());
  CHECK(full_match(*re, "999999999999999"));
  CHECK_FALSE(full_match(*re, "1000000000000000"));
  CHECK_FALSE(full_match(*re, "01"));
  auto decimals = Regex::compile(*number_range_pattern({std::nullopt, 1e20, false, false}, false));  // past 15 digits: no bound
  REQUIRE(decimals.ok());
  CHECK(full_match(*decimals, "-999999999999999.123456789012345"));
  CHECK_FALSE(full_match(*decimals, "1e5"));
  CHECK_FALSE(full_match(*decimals, "1.1234567890123456"));  // fractions of at most 15 digits
  CHECK(number_range_pattern({0.5, std::nullopt, false, false}, false).error().message ==
        "minimum 0.5: the bounds of a number must be whole numbers (an integer's need not be)");
  CHECK(number_range_pattern({std::nullopt, 2.25, false, true}, false).error().message ==
        "exclusiveMaximum 2.25: the bounds of a number must be whole numbers (an integer's need not be)");
  CHECK(number_range_pattern({std::nullopt, -1e16, false, false}, true).error().message ==
        "maximum -10000000000000000 leaves no number of at most 15 digits");
  CHECK(number_range_pattern({1.0, 1.0, true, false}, true).error().message ==
        "no integer lies within exclusiveMinimum and maximum");
  CHECK(number_range_pattern({1.0, 1.0, false, false}, false).ok());  // 1, 1.0, 1.00...
}
