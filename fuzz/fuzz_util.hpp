// Helpers shared by the fuzz targets (executables only; nothing here is linked into the libraries).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace actord::fuzz {

// The input split at NUL bytes: a target reads part 0 as its main document and the others as extras (the seeds in
// fuzz/corpus/ are written that way).
inline std::vector<std::string> split_nul(const uint8_t* data, size_t size, size_t max_parts = 64) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && parts.size() < max_parts) parts.emplace_back();
    else parts.back().push_back(static_cast<char>(data[i]));
  }
  return parts;
}

// Aborts with a message: a broken property is a crash libFuzzer records.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what.c_str());
  std::abort();
}
inline void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// One scratch folder per fuzzer process (files are rewritten for every input), removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "actord-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) fail("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

  // Writes `content` to name, or removes name when `present` is false.
  void put(const std::string& name, std::string_view content, bool present = true) const {
    const auto p = path_ / name;
    if (!present) {
      std::error_code ec;
      std::filesystem::remove(p, ec);
      return;
    }
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }

 private:
  std::filesystem::path path_;
};

inline std::filesystem::path source_dir() { return ACTORD_SOURCE_DIR; }

}  // namespace actord::fuzz
