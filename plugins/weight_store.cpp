#include "plugins/weight_store.hpp"

#include <functional>

#include "executors/cpu/blocked_weights.hpp"
#include "executors/sampler.hpp"

namespace actord {

Result<std::shared_ptr<WeightStore>> WeightStore::open(const ModelConfig& config, const ModelLoadOptions& options) {
  std::shared_ptr<WeightStore> store(new WeightStore());
  store->seed_ = options.seed;
  store->tied_ = config.tie_word_embeddings;
  std::optional<DType> requested;
  if (options.dtype != "auto") {
    requested = parse_dtype(options.dtype);
    if (!requested) return make_error(Errc::invalid_config, "unknown dtype '" + options.dtype + "'");
  }
  if (options.load_format == "dummy") {
    auto from_config = parse_dtype(config.torch_dtype);
    store->served_ = requested ? *requested : (from_config ? *from_config : DType::bf16);
    return store;
  }
  if (options.load_format != "auto" && options.load_format != "safetensors") {
    return make_error(Errc::invalid_config, "unknown load_format '" + options.load_format + "'");
  }
  auto loader = WeightLoader::open(options.model_dir);
  if (!loader) return loader.error();
  store->file_.emplace(std::move(*loader));
  const DType stored = store->file_->first_dtype().value_or(DType::f32);
  store->served_ = requested ? *requested : stored;
  if (requested) store->convert_to_ = *requested;
  return store;
}

bool WeightStore::contains(const std::string& name) const {
  if (file_) return file_->contains(name);
  return name != "lm_head.weight" || !tied_;
}

const void* WeightStore::own(std::vector<unsigned char> bytes) {
  owned_.push_back(std::move(bytes));
  return owned_.back().data();
}

size_t WeightStore::owned_bytes() const {
  size_t n = 0;
  for (const auto& b : owned_) n += b.size();
  for (const auto& b : blocked_) n += b.size();
  return n;
}

// Seeded values: norm weights near 1, everything else small and centred, like a freshly initialised model.
std::vector<float> WeightStore::dummy_values(const std::string& name, size_t n) const {
  const uint64_t key = std::hash<std::string>{}(name) ^ (seed_ * 0x9e3779b97f4a7c15ull);
  const bool is_norm = name.find("norm") != std::string::npos;
  std::vector<float> v(n);
  uint64_t state = key;
  for (size_t i = 0; i < n; ++i) {
    state += 0x9e3779b97f4a7c15ull;
    const float u = static_cast<float>(uniform_from_key(state)) * 2.0f - 1.0f;  // [-1, 1)
    v[i] = is_norm ? 1.0f + 0.1f * u : 0.035f * u;                                // std ~0.02 off the norms
  }
  return v;
}

Result<cpu::WeightMatrix> WeightStore::matrix(const std::string& name, int64_t rows, int64_t cols,
                                              cpu::WeightLayout layout) {
  const TensorView* from_file = nullptr;
  auto m = row_major(name, rows, cols, &from_file);
  if (!m || layout == cpu::WeightLayout::row_major) return m;
  blocked_.emplace_back(cpu::blocked_bytes(m->dtype, rows, cols));
  const cpu::WeightMatrix blocked = cpu::pack_blocked(*m, blocked_.back().data());
  drop_row_major(from_file);
  return blocked;
}

Result<cpu::WeightMatrix> WeightStore::glu_matrix(const std::string& gate_name, const std::string& up_name,
                                                  int64_t ff, int64_t cols) {
  const TensorView* gate_file = nullptr;
  const TensorView* up_file = nullptr;
  auto gate = row_major(gate_name, ff, cols, &gate_file);
  if (!gate) return gate;
  auto up = row_major(up_name, ff, cols, &up_file);
  if (!up) {
    drop_row_major(gate_file);
    return up;
  }
  blocked_.emplace_back(cpu::glu_bytes(gate->dtype, ff, cols));
  const cpu::WeightMatrix fused = cpu::pack_glu(*gate, *up, blocked_.back().data());
  drop_row_major(up_file);
  drop_row_major(gate_file);
  return fused;
}

void WeightStore::drop_row_major(const TensorView* from_file) {
  if (from_file) {
    release_pages(*from_file);
  } else {
    owned_.pop_back();
  }
}

Result<cpu::WeightMatrix> WeightStore::row_major(const std::string& name, int64_t rows, int64_t cols,
                                                 const TensorView** from_file) {
  cpu::WeightMatrix m;
  m.rows = rows;
  m.cols = cols;
  if (!file_) {
    const auto values = dummy_values(name, static_cast<size_t>(rows * cols));
    std::vector<unsigned char> bytes(values.size() * dtype_size(served_));
    convert_from_f32(served_, values.data(), bytes.data(), values.size());
    m.dtype = served_;
    m.data = own(std::move(bytes));
    return m;
  }
  auto view = file_->view(name, {rows, cols});
  if (!view) return view.error();
  if (!convert_to_ || *convert_to_ == (*view)->dtype) {
    m.dtype = (*view)->dtype;
    m.data = (*view)->data;
    *from_file = *view;
    return m;
  }
  std::vector<float> f32((*view)->num_elements());
  convert_to_f32(**view, f32.data());
  std::vector<unsigned char> bytes(f32.size() * dtype_size(*convert_to_));
  convert_from_f32(*convert_to_, f32.data(), bytes.data(), f32.size());
  m.dtype = *convert_to_;
  m.data = own(std::move(bytes));
  return m;
}

Result<std::vector<float>> WeightStore::vector_f32(const std::string& name, int64_t n) {
  if (!file_) {
    auto v = dummy_values(name, static_cast<size_t>(n));
    // Round through the served dtype so dummy models behave like files of that dtype.
    std::vector<unsigned char> bytes(v.size() * dtype_size(served_));
    convert_from_f32(served_, v.data(), bytes.data(), v.size());
    convert_to_f32(served_, bytes.data(), v.data(), v.size());
    return v;
  }
  return file_->load_f32(name, {n});
}

}  // namespace actord
