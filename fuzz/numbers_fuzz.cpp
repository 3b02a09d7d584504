// The number parsers of the topology beyond yaml-cpp's own (core/topology_config): parse_byte_size ("256MiB",
// "1.5GiB", "512KB", "1048576") and parse_duration ("2s", "500ms", "1.5s", "2m", "100us"). Each input goes to both.
// Properties: neither crashes; what they accept equals an independent computation (byte sizes in 128-bit
// arithmetic: whole part times the unit plus the first nine fraction digits times the unit, rounded down; durations
// with strtod, rounded up to milliseconds); they refuse exactly what does not fit (64 bits of bytes, 10^12 ms).
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/topology_config.hpp"
#include "fuzz_util.hpp"

using namespace actord;

namespace {

using u128 = unsigned __int128;
constexpr u128 kOver = ~static_cast<u128>(0);

// The byte size `text` names: nothing when it is not a size, kOver when it is one that does not fit in 64 bits.
std::optional<u128> byte_size(const std::string& text) {
  size_t i = 0;
  u128 whole = 0;
  bool over = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    whole = whole * 10 + static_cast<u128>(text[i] - '0');
    if (whole > UINT64_MAX) over = true, whole = static_cast<u128>(UINT64_MAX) + 1;
    ++i;
  }
  if (i == 0) return std::nullopt;
  u128 digits = 0, scale = 1;
  if (i < text.size() && text[i] == '.') {
    size_t j = i + 1, used = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
      if (used++ < 9) digits = digits * 10 + static_cast<u128>(text[j] - '0'), scale *= 10;
      ++j;
    }
    if (j == i + 1) return std::nullopt;
    i = j;
  }
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  static const std::pair<const char*, u128> units[] = {
      {"", 1}, {"B", 1}, {"KiB", u128{1} << 10}, {"MiB", u128{1} << 20}, {"GiB", u128{1} << 30},
      {"TiB", u128{1} << 40}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"TB", 1000000000000},
      {"K", u128{1} << 10}, {"M", u128{1} << 20}, {"G", u128{1} << 30}, {"T", u128{1} << 40}};
  for (const auto& [name, mult] : units) {
    if (unit != name) continue;
    if (over) return kOver;
    const u128 bytes = whole * mult + mult * digits / scale;
    return bytes > UINT64_MAX ? kOver : bytes;
  }
  return std::nullopt;
}

// The milliseconds `text` names: nothing when it is not a duration, -1 when it is longer than 10^12 ms.
std::optional<double> duration_ms(const std::string& text) {
  size_t i = 0, dots = 0, digits = 0;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i)
    (text[i] == '.' ? dots : digits)++;
  if (digits == 0 || dots > 1 || text.find('.', i) != std::string::npos) return std::nullopt;
  const double value = std::strtod(text.substr(0, i).c_str(), nullptr);
  if (!std::isfinite(value)) return std::nullopt;
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  static const std::pair<const char*, double> units[] = {{"", 1e3}, {"s", 1e3}, {"ms", 1}, {"us", 1e-3},
                                                         {"m", 60e3}, {"h", 3600e3}};
  for (const auto& [name, mult] : units) {
    if (unit != name) continue;
    const double ms = std::ceil(value * mult);
    return ms > 1e12 ? -1.0 : ms;
  }
  return std::nullopt;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);

  const auto bytes = parse_byte_size(text);
  const auto want_bytes = byte_size(text);
  if (!want_bytes || *want_bytes == kOver) {
    fuzz::require(!bytes.ok(), "byte size '" + text + "' accepted as " + (bytes.ok() ? std::to_string(*bytes) : ""));
    fuzz::require(!bytes.error().message.empty(), "an empty error message");
  } else {
    fuzz::require(bytes.ok(), "byte size '" + text + "' refused: " + (bytes.ok() ? "" : bytes.error().message));
    fuzz::require(static_cast<u128>(*bytes) == *want_bytes, "'" + text + "' parsed as " + std::to_string(*bytes));
  }

  const auto ms = parse_duration(text);
  const auto want_ms = duration_ms(text);
  if (!want_ms || *want_ms < 0) {
    fuzz::require(!ms.ok(), "duration '" + text + "' accepted as " + (ms.ok() ? std::to_string(ms->count()) : ""));
  } else {
    fuzz::require(ms.ok(), "duration '" + text + "' refused: " + (ms.ok() ? "" : ms.error().message));
    fuzz::require(ms->count() >= 0 && static_cast<double>(ms->count()) == *want_ms,
                  "duration '" + text + "' parsed as " + std::to_string(ms->count()) + " ms");
  }
  return 0;
}
