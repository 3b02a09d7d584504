#include "structured/number_range.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace actord::structured {

namespace {

constexpr int64_t kLargest = 999'999'999'999'999;  // kMaxNumberRangeDigits nines
static_assert(kMaxNumberRangeDigits == 15);
const char* const kFraction = "(?:\\.\\d{1,15})?";  // any fraction, or none
const char* const kZeroFraction = "(?:\\.0{1,15})?";

std::string group(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  std::string out = "(?:";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
  return out + ")";
}

// A fraction of 1 to 15 digits, not all zeros: its first nonzero digit after i zeros, then up to 14 - i digits.
std::string nonzero_fraction() {
  std::vector<std::string> parts;
  for (int zeros = 0; zeros < kMaxNumberRangeDigits; ++zeros) {
    std::string p = std::string(static_cast<size_t>(zeros), '0') + "[1-9]";
    if (const int rest = kMaxNumberRangeDigits - 1 - zeros; rest > 0) p += "\\d{0," + std::to_string(rest) + "}";
    parts.push_back(p);
  }
  return "\\." + group(parts);
}

std::string digits(size_t count) {
  if (count == 0) return "";
  return count == 1 ? "\\d" : "\\d{" + std::to_string(count) + "}";
}

std::string digit_class(int lo, int hi) {
  if (lo == hi) return std::string(1, static_cast<char>('0' + lo));
  if (lo == 0 && hi == 9) return "\\d";
  return std::string("[") + static_cast<char>('0' + lo) + "-" + static_cast<char>('0' + hi) + "]";
}

// The decimal texts from lo to hi, both of the same length (leading zeros as written).
std::string same_length(const std::string& lo, const std::string& hi) {
  if (lo.empty() || lo == hi) return lo;
  if (lo[0] == hi[0]) return lo.substr(0, 1) + same_length(lo.substr(1), hi.substr(1));
  const size_t rest = lo.size() - 1;
  const bool lo_rest_zero = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_rest_nine = hi.find_first_not_of('9', 1) == std::string::npos;
  int first = lo[0] - '0';
  const int last = hi[0] - '0';
  std::vector<std::string> parts;
  if (!lo_rest_zero) {
    parts.push_back(lo.substr(0, 1) + same_length(lo.substr(1), std::string(rest, '9')));
    ++first;
  }
  const int middle_last = hi_rest_nine ? last : last - 1;
  if (first <= middle_last) parts.push_back(digit_class(first, middle_last) + digits(rest));
  if (!hi_rest_nine) parts.push_back(hi.substr(0, 1) + same_length(std::string(rest, '0'), hi.substr(1)));
  return group(parts);
}

int64_t power_of_ten(size_t n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// The texts of the integers from a to b, 0 <= a <= b <= kLargest, without leading zeros.
std::string whole_range(int64_t a, int64_t b) {
  std::vector<std::string> parts;
  for (size_t length = std::to_string(a).size(); length <= std::to_string(b).size(); ++length) {
    const int64_t lo = std::max(a, length == 1 ? 0 : power_of_ten(length - 1));
    const int64_t hi = std::min(b, power_of_ten(length) - 1);
    parts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  return group(parts);
}

// Non-negative decimals y with a < y (a <= y when a_in) and y < b (y <= b when b_in; no b: any up to kLargest's
// integer part); a and b whole. Empty when none.
std::string decimals_between(int64_t a, bool a_in, std::optional<int64_t> b, bool b_in) {
  if (b && *b < a) return "";
  if (b && *b == a) return a_in && b_in ? std::to_string(a) + kZeroFraction : "";
  std::vector<std::string> parts{std::to_string(a) + (a_in ? kFraction : nonzero_fraction())};
  const int64_t top = b ? *b - 1 : kLargest;
  if (a + 1 <= top) parts.push_back("(?:" + whole_range(a + 1, top) + ")" + kFraction);
  if (b && b_in) parts.push_back(std::to_string(*b) + kZeroFraction);
  return group(parts);
}

Error refuse(const std::string& what) { return make_error(Errc::invalid_argument, what); }

std::string number_text(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Result<std::string> number_range_pattern(const NumberBounds& bounds, bool integer) {
  const char* min_key = bounds.exclusive_minimum ? "exclusiveMinimum" : "minimum";
  const char* max_key = bounds.exclusive_maximum ? "exclusiveMaximum" : "maximum";
  for (const auto& [bound, key] : {std::pair{bounds.minimum, min_key}, std::pair{bounds.maximum, max_key}}) {
    if (bound && !std::isfinite(*bound)) return refuse(std::string(key) + " must be a finite number");
    if (bound && !integer && std::floor(*bound) != *bound && std::fabs(*bound) <= static_cast<double>(kLargest))
      return refuse(std::string(key) + " " + number_text(*bound) +
                    ": the bounds of a number must be whole numbers (an integer's need not be)");
  }
  // The whole-number bounds, inclusive for integers; none where past kLargest on the open side.
  std::optional<int64_t> lo, hi;
  bool lo_in = !bounds.exclusive_minimum, hi_in = !bounds.exclusive_maximum;
  const double limit = static_cast<double>(kLargest);
  if (bounds.minimum) {
    double m = *bounds.minimum;
    if (integer) m = bounds.exclusive_minimum ? std::floor(m) + 1 : std::ceil(m), lo_in = true;
    if (m > limit) return refuse(std::string(min_key) + " " + number_text(*bounds.minimum) + " leaves no number of at most 15 digits");
    if (m >= -limit) lo = static_cast<int64_t>(m);
  }
  if (bounds.maximum) {
    double m = *bounds.maximum;
    if (integer) m = bounds.exclusive_maximum ? std::ceil(m) - 1 : std::floor(m), hi_in = true;
    if (m < -limit) return refuse(std::string(max_key) + " " + number_text(*bounds.maximum) + " leaves no number of at most 15 digits");
    if (m <= limit) hi = static_cast<int64_t>(m);
  }
  const std::string empty = std::string("no ") + (integer ? "integer" : "number") + " lies within " + min_key +
                            " and " + max_key;
  if (lo && hi && (*lo > *hi || (*lo == *hi && !(lo_in && hi_in)))) return refuse(empty);

  std::vector<std::string> parts;
  if (integer) {
    if (!hi || *hi >= 0) parts.push_back(whole_range(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : kLargest));
    if (!lo || *lo < 0) parts.push_back("-(?:" + whole_range(hi && *hi < 0 ? -*hi : 1, lo ? -*lo : kLargest) + ")");
    return group(parts);
  }
  // Non-negative numbers, then negative ones as -y (y > 0), y's bounds mirrored.
  if (!hi || *hi > 0 || (*hi == 0 && hi_in)) {
    const bool from_lo = lo && *lo >= 0;
    if (std::string p = decimals_between(from_lo ? *lo : 0, from_lo ? lo_in : true, hi, hi_in); !p.empty())
      parts.push_back(p);
  }
  if (!lo || *lo < 0) {
    const bool from_hi = hi && *hi < 0;
    std::optional<int64_t> y_top;
    if (lo) y_top = -*lo;
    if (std::string p = decimals_between(from_hi ? -*hi : 0, from_hi ? hi_in : false, y_top, lo_in); !p.empty())
      parts.push_back("-(?:" + p + ")");
  }
  if (parts.empty()) return refuse(empty);
  return group(parts);
}

}  // namespace actord::structured
