// Helpers shared by tests: paths of the repo and the built binary, temporary folders, the reference output.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace actord::test {

inline std::filesystem::path source_dir() { return ACTORD_SOURCE_DIR; }
inline std::filesystem::path stories_dir() { return source_dir() / "models/stories260K"; }
inline std::filesystem::path actord_binary() { return ACTORD_BINARY; }

inline std::vector<int32_t> reference_ids() {
  std::ifstream in(stories_dir() / "reference_greedy_256.json");
  return nlohmann::json::parse(in).at("generated_ids").get<std::vector<int32_t>>();
}

// A fresh folder under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("actord-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary);
  out << content;
}

// Copies the stories260K folder into dir (to damage a copy).
inline std::filesystem::path copy_stories(const std::filesystem::path& dir) {
  const auto dst = dir / "stories260K";
  std::filesystem::copy(stories_dir(), dst, std::filesystem::copy_options::recursive);
  return dst;
}

}  // namespace actord::test
