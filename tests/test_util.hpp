// Helpers shared by tests: paths of the repo and the built binary, temporary folders, the reference output.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace actord::test {

// The repository and the actord binary the tests were built with; the environment's ACTORD_SOURCE_DIR and
// ACTORD_BINARY win (a test binary carried to another machine, where the checkout lies elsewhere:
// scripts/device_bundle.sh).
inline std::filesystem::path source_dir() {
  const char* env = std::getenv("ACTORD_SOURCE_DIR");
  return env && *env ? env : ACTORD_SOURCE_DIR;
}
// n values drawn from N(0, scale^2).
inline std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::filesystem::path stories_dir() { return source_dir() / "models/stories260K"; }
// A random PEFT LoRA adapter of rank `rank` for the model folder `model` at `out` (tests/reference/hf_reference.py
// make-lora, with Debian's python3-torch); whether it was written.
inline bool make_lora(const std::filesystem::path& model, const std::filesystem::path& out, int rank, int seed = 0) {
  const std::string cmd = "/usr/bin/python3 " + (source_dir() / "tests/reference/hf_reference.py").string() +
                          " make-lora --model " + model.string() + " --out " + out.string() + " --rank " +
                          std::to_string(rank) + " --seed " + std::to_string(seed) + " > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}
inline std::filesystem::path actord_binary() {
  const char* env = std::getenv("ACTORD_BINARY");
  return env && *env ? env : ACTORD_BINARY;
}

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

// A model folder `dir` with `config_json` as its config.json and stories260K's tokenizer files: a random-weight
// model (load_format dummy, or weights written beside) of the tokenizer's 512 ids.
inline std::filesystem::path model_folder(const std::filesystem::path& dir, const std::string& config_json) {
  std::filesystem::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    if (std::filesystem::exists(stories_dir() / f)) std::filesystem::copy_file(stories_dir() / f, dir / f);
  }
  write_file(dir / "config.json", config_json);
  return dir;
}

// Copies the stories260K folder into dir (to damage a copy).
inline std::filesystem::path copy_stories(const std::filesystem::path& dir) {
  const auto dst = dir / "stories260K";
  std::filesystem::copy(stories_dir(), dst, std::filesystem::copy_options::recursive);
  return dst;
}

}  // namespace actord::test
