// Where a model's weights come from: memory-mapped safetensors (single file or shards), or `load_format: dummy`
// random values of the configured shape for benchmarks.
//
// Contract: matrices come back in their stored dtype (or the dtype the topology asks for), either as row-major views
// of the file (no copy) or, when asked for the blocked layout (executors/cpu/blocked_weights.hpp), as a rearranged
// copy the store owns; the file pages the copy came from are then released, so resident memory holds one copy.
// Small vectors (norms, biases) come back as f32 copies. Views stay
// valid as long as the store lives: a model keeps a shared_ptr to it. Errors name the tensor: missing, or wrong
// shape ("expected [64, 512], found [64, 511]"). Dummy weights are seeded: the same seed gives the same values.
#pragma once

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/large_buffer.hpp"
#include "executors/cpu/gemm.hpp"
#include "memory/weight_loader.hpp"
#include "plugins/model_config.hpp"

namespace actord {

struct ModelLoadOptions {
  std::filesystem::path model_dir;
  std::string dtype = "auto";         // auto keeps the stored dtype; float32 | bfloat16 | float16 convert at load
  std::string load_format = "auto";   // auto (safetensors) | dummy
  uint64_t seed = 0;                  // for dummy weights
  cpu::Isa isa = cpu::Isa::automatic; // the forward pass's kernels (groups[i].cpu_isa); one the CPU lacks is refused
};

class WeightStore {
 public:
  static Result<std::shared_ptr<WeightStore>> open(const ModelConfig& config, const ModelLoadOptions& options);

  bool contains(const std::string& name) const;
  Result<cpu::WeightMatrix> matrix(const std::string& name, int64_t rows, int64_t cols,
                                   cpu::WeightLayout layout = cpu::WeightLayout::row_major);
  Result<std::vector<float>> vector_f32(const std::string& name, int64_t n);
  // A gated MLP's gate and up matrices ([ff, cols] each) fused for cpu::gemm_nt_glu (cpu::pack_glu), owned by the
  // store; the sources are released as for blocked matrices.
  Result<cpu::WeightMatrix> glu_matrix(const std::string& gate_name, const std::string& up_name, int64_t ff,
                                       int64_t cols);

  // The dtype matrices are served in (the stored one, or the requested conversion).
  DType served_dtype() const { return served_; }
  size_t owned_bytes() const;  // memory this store allocated (dummy weights, dtype conversions, blocked copies)

 private:
  WeightStore() = default;
  const void* own(std::vector<unsigned char> bytes);
  // The row-major matrix; `from_file` is the file's tensor when the result is a view of it.
  Result<cpu::WeightMatrix> row_major(const std::string& name, int64_t rows, int64_t cols,
                                      const TensorView** from_file);
  // Frees what backed a row_major() result once it has been copied: the file's pages when it was a view, else the
  // store's row-major copy (the last one made).
  void drop_row_major(const TensorView* from_file);
  std::vector<float> dummy_values(const std::string& name, size_t n) const;

  std::optional<WeightLoader> file_;   // empty for dummy weights
  std::optional<DType> convert_to_;    // set when the topology's dtype differs from the stored one
  DType served_ = DType::f32;
  uint64_t seed_ = 0;
  bool tied_ = false;
  std::deque<std::vector<unsigned char>> owned_;  // row-major copies (dummy weights, dtype conversions)
  std::deque<LargeBuffer> blocked_;              // blocked copies, on huge pages
};

}  // namespace actord
