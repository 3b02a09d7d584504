// number_range_pattern: a JSON Schema number or integer with bounds (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum) as a regular expression (regex.hpp syntax) over the JSON texts of the numbers it admits, so that
// JsonMatcher can hold a generated number to its bounds a byte at a time.
//
// Contract: every text the pattern matches is a JSON number within the bounds, and every whole number within them
// with at most kMaxDigits digits has its text among them. Integers: -? (0 | [1-9][0-9]*), no -0, at most kMaxDigits
// digits; bounds need not be whole (minimum 2.5 admits 3 on). Numbers: an integer part as above and an optional
// fraction of 1 to kMaxDigits digits, no exponent; their bounds must be whole numbers (an Error names the keyword
// otherwise). A bound past kMaxDigits digits on the open side is as no bound; one that leaves no number is an
// Error. Errors name the keyword, without a path (the schema compiler adds it).
#pragma once

#include <optional>
#include <string>

#include "core/status.hpp"

namespace actord::structured {

struct NumberBounds {
  std::optional<double> minimum, maximum;
  bool exclusive_minimum = false, exclusive_maximum = false;
};

inline constexpr int kMaxNumberRangeDigits = 15;  // integer and fraction parts each: every value exact in a double

Result<std::string> number_range_pattern(const NumberBounds& bounds, bool integer);

}  // namespace actord::structured
