// Where a model's weights come from: memory-mapped safetensors (single file or shards), a GGUF file (its float
// tensors as views, its quantized ones as codes: plugins/gguf_model.hpp names them), or `load_format: dummy` random
// values of the configured shape for benchmarks.
//
// Contract: matrices go to the rank's executor backend (executors/backend.hpp) in their stored dtype (or the dtype
// the topology asks for): the backend copies each into its own memory and layout, and the file pages (or the
// store's converted copy) it came from are then released, so resident memory holds one copy; a matrix the backend
// reads in place (Backend::keeps_host_view: the CPU's lookup-only embedding) stays a view of the file, valid as
// long as the store lives (a model keeps a shared_ptr to it). With a quantization, every matrix that is multiplied
// (not a lookup-only embedding) is quantized from its served values and uploaded as codes and scales. Small vectors (norms, biases) come back as f32 copies. Errors name the tensor: missing, or wrong
// shape ("expected [64, 512], found [64, 511]"). Dummy weights are seeded: the same seed gives the same values.
#pragma once

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/gguf.hpp"
#include "core/quantization.hpp"
#include "executors/backend.hpp"
#include "memory/weight_loader.hpp"
#include "plugins/lora_adapter.hpp"
#include "plugins/model_config.hpp"
#include "plugins/weight_store_fused.hpp"

namespace actord {

// Which rank of a tensor x pipeline parallel replica a model is loaded for (core/topology_plan's shard_of_rank says
// what it holds).
struct RankPlace {
  int tp = 1, pp = 1;
  int tp_rank = 0, pp_rank = 0;
  // 1, tp, or a multiple of tp (pp 1): this rank holds whole experts, num_experts / ep of them (shard_of_rank)
  int ep = 1;
  int redundant_experts = 0;  // ep > 1: extra expert slots (EPLB), ExpertPlacement::initial's copies at first
  int lane = 0;  // ep > tp or AFD: the rank's attention data parallel lane (its own sequences), 0 .. lanes() - 1
  // Attention-FFN disaggregation: the replica's attention ranks (lanes x tp) and FFN ranks, and this rank's index
  // among the FFN ranks (-1: an attention rank). All 0 without AFD. An FFN rank has tp 1, pp 1, ep 1.
  int afd_attention = 0, afd_ffn = 0;
  int ffn_rank = -1;
  bool afd() const { return afd_ffn > 0; }
  bool ffn() const { return ffn_rank >= 0; }
  int lanes() const { return afd() ? afd_attention / tp : ep > tp ? ep / tp : 1; }
  // Whether the replica's ranks share an EP group (RankLinks::ep): attention lanes or AFD.
  bool ep_group() const { return lanes() > 1 || afd(); }
  // Its rank in the EP group: lane * tp + tp rank; with AFD the FFN ranks follow the attention ranks.
  int ep_rank() const { return ffn() ? afd_attention + ffn_rank : lane * tp + tp_rank; }
  int ep_group_size() const { return afd() ? afd_attention + afd_ffn : ep; }
  // The ranks serving experts (or AFD's MLP slices) and this rank's index among them (-1: it serves none).
  int expert_ranks() const { return afd() ? afd_ffn : ep; }
  int expert_rank() const { return afd() ? ffn_rank : ep_rank(); }
  bool sharded() const { return tp > 1 || pp > 1 || afd(); }
};

struct ModelLoadOptions {
  std::filesystem::path model_dir;
  std::string dtype = "auto";         // auto keeps the stored dtype; float32 | bfloat16 | float16 convert at load
  std::string load_format = "auto";   // auto (safetensors) | dummy
  uint64_t seed = 0;                  // for dummy weights
  QuantSpec quantization;             // enabled: matrices multiplied (not looked up) are quantized at load
  exec::Backend* backend = nullptr;    // the rank's executor backend: the weights go to its memory (required)
  RankPlace place;                     // the shard to load
  int max_model_len = 0;               // the context the engine serves (0: max_position_embeddings): LongRoPE's choice
  // LoRA adapters (lora.modules) the model serves besides its base: SeqSlice::lora k runs the k-th (1-based).
  std::vector<std::shared_ptr<const LoraAdapter>> lora;
};

// The part of a stored matrix a rank loads (a tensor-parallel shard): rows [row_first, row_first + row_count) and
// columns [col_first, col_first + col_count) of the full [rows, cols] matrix; a count of -1 takes everything from
// its first index on.
struct MatrixSlice {
  int64_t row_first = 0, row_count = -1;
  int64_t col_first = 0, col_count = -1;
};

// Names: HF's. A checkpoint that stores q/k/v in one `qkv_proj` and gate/up in one `gate_up_proj` (Phi-3) serves
// q_proj, k_proj, v_proj, gate_proj and up_proj as rows of those (a view when nothing is converted), from safetensors
// and GGUF alike; a multimodal checkpoint's text tensors are found under ModelConfig::weight_prefix.
class WeightStore {
 public:
  static Result<std::shared_ptr<WeightStore>> open(const ModelConfig& config, const ModelLoadOptions& options);

  bool contains(const std::string& name) const;
  // rows, cols: the stored (full) shape, checked against the file; the result has the slice's shape.
  Result<exec::Weight> weight(exec::Backend& backend, const std::string& name, int64_t rows, int64_t cols,
                              exec::WeightUse use = exec::WeightUse::gemm, MatrixSlice slice = {});
  // Elements [first, first + count) of a stored vector of n (count -1: to the end).
  Result<std::vector<float>> vector_f32(const std::string& name, int64_t n, int64_t first = 0, int64_t count = -1);
  // A gated MLP's gate and up matrices ([ff, cols] each; rows [row_first, row_first + row_count) of each, count -1:
  // all) as one weight for Backend::gemm_glu.
  Result<exec::Weight> glu_weight(exec::Backend& backend, const std::string& gate_name, const std::string& up_name,
                                  int64_t ff, int64_t cols, int64_t row_first = 0, int64_t row_count = -1);

  // The dtype matrices are served in (the stored one, or the requested conversion).
  DType served_dtype() const { return served_; }
  // The quantization multiplied matrices get at load (none: they keep served_dtype()).
  const QuantSpec& quantization() const { return quant_; }

 private:
  WeightStore() = default;
  const void* own(std::vector<unsigned char> bytes);
  // The row-major matrix; `from_file` is the file's tensor when the result is a view of it.
  Result<exec::HostMatrix> row_major(const std::string& name, int64_t rows, int64_t cols, MatrixSlice slice,
                                      const TensorView** from_file);
  // Frees what backed a row_major() result once it has been copied: the file's pages when it was a view, else the
  // store's row-major copy (the last one made).
  void drop_row_major(const TensorView* from_file);
  std::vector<float> dummy_values(const std::string& name, size_t n) const;
  // Slice s of the dummy matrix `name` [?, cols] in dtype: what dummy_values of the whole matrix, cut and converted,
  // would give, made directly.
  std::vector<unsigned char> dummy_slice(const std::string& name, int64_t cols, const MatrixSlice& s, DType dtype) const;
  // A GGUF tensor by its HF name, shape-checked against [rows, cols], its rows in HF order and the slice applied: a
  // row-major float matrix (a view of the file when nothing moved, else owned; *from_gguf set for a view) or
  // quantized codes.
  struct GgufMatrix {
    std::optional<exec::HostMatrix> host;
    std::optional<QuantizedMatrix> quantized;
  };
  Result<GgufMatrix> gguf_matrix(const std::string& name, int64_t rows, int64_t cols, MatrixSlice slice,
                                 const GgufTensor** from_gguf);
  // An AWQ / GPTQ checkpoint's matrix for an HF weight name (its base's qweight, qzeros, scales, g_idx), the slice
  // applied; nullopt when the checkpoint is not quantized or this matrix is not (embeddings, lm_head).
  Result<std::optional<QuantizedMatrix>> checkpoint_matrix(const std::string& name, int64_t rows, int64_t cols,
                                                           MatrixSlice slice);
  Result<exec::Weight> gguf_weight(exec::Backend& backend, const std::string& name, int64_t rows, int64_t cols,
                                   exec::WeightUse use, MatrixSlice slice);
  // A weight as stored: the tensor's name (with prefix_), its row count and the slice of it the weight is.
  struct Located {
    std::string name;
    int64_t rows = 0;
    MatrixSlice slice;
  };
  // Where HF weight `name` ([rows, cols], the slice of it) is: itself, or rows of a fused tensor (fused_part) that
  // the checkpoint has instead.
  Result<Located> locate(const std::string& name, int64_t rows, int64_t cols, MatrixSlice slice) const;
  // Whether the checkpoint has this tensor (a name as stored: prefix_ included); dummy weights have every tensor.
  bool stored(const std::string& name) const;
  // The fused tensor holding `name` (as stored) where the checkpoint has that instead; nullopt otherwise.
  std::optional<store_detail::FusedPart> stored_fused(const std::string& name) const;
  Result<exec::Weight> gguf_glu_weight(exec::Backend& backend, const Located& gate, const Located& up, int64_t cols);

  std::optional<WeightLoader> file_;   // safetensors; empty for dummy weights and GGUF
  std::shared_ptr<GgufFile> gguf_;     // a GGUF file's tensors
  std::optional<DType> convert_to_;    // set when the topology's dtype differs from the stored one
  DType served_ = DType::f32;
  QuantSpec quant_;
  ModelConfig::CheckpointQuantization checkpoint_;  // AWQ / GPTQ weights in the safetensors
  uint64_t seed_ = 0;
  bool tied_ = false;
  std::deque<std::vector<unsigned char>> owned_;  // row-major copies (dummy weights, dtype conversions)
  std::string prefix_;       // ModelConfig::weight_prefix: the text model's tensors in a multimodal checkpoint
  store_detail::FusedRows fused_;  // the row counts of the parts of fused tensors
};

}  // namespace actord
