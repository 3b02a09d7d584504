// Running a reference script of tests/reference (a Python peer) on cases written as JSON, and the mutations that
// turn texts a matcher takes into texts it may refuse (what the structured tests hand the peers).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace actord::test {

struct ReferenceRun {
  int exit_code;
  std::string report;  // what the script printed
};

// /usr/bin/python3 tests/reference/<script> on a temporary file holding `cases`.
inline ReferenceRun run_reference(const std::string& script, const nlohmann::json& cases) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("actord_" + std::filesystem::path(script).stem().string() + "_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << cases.dump();
  const std::string out = file.string() + ".out";
  const std::string cmd = "/usr/bin/python3 " + (source_dir() / "tests/reference" / script).string() + " " +
                          file.string() + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  ReferenceRun run{rc, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())};
  std::filesystem::remove(file);
  std::filesystem::remove(out);
  return run;
}

// `text`'s UTF-8 characters edited once: one removed, one inserted or replaced from `alphabet`, or one repeated.
inline std::string mutated(const std::string& text, std::mt19937& rng, const std::vector<std::string>& alphabet) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (i + n < text.size() && (static_cast<uint8_t>(text[i + n]) & 0xC0) == 0x80) ++n;
    chars.push_back(text.substr(i, n));
    i += n;
  }
  const size_t at = chars.empty() ? 0 : rng() % (chars.size() + 1);
  const auto pos = chars.begin() + static_cast<long>(std::min(at, chars.size()));
  switch (rng() % 4) {
    case 0:
      if (at < chars.size()) chars.erase(pos);
      break;
    case 1: chars.insert(pos, alphabet[rng() % alphabet.size()]); break;
    case 2:
      if (at < chars.size()) chars[at] = alphabet[rng() % alphabet.size()];
      break;
    default:
      if (at < chars.size()) chars.insert(pos, chars[at]);
  }
  std::string out;
  for (const auto& c : chars) out += c;
  return out;
}

}  // namespace actord::test
