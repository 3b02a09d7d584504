#include "plugins/weight_store.hpp"

#include <algorithm>
#include <functional>
#include <thread>

#include "executors/sampler.hpp"
#include "memory/gguf_tensors.hpp"
#include "plugins/gguf_model.hpp"
#include "plugins/weight_store_internal.hpp"

namespace actord {

Result<std::shared_ptr<WeightStore>> WeightStore::open(const ModelConfig& config, const ModelLoadOptions& options) {
  std::shared_ptr<WeightStore> store(new WeightStore());
  store->seed_ = options.seed;
  store->quant_ = options.quantization;
  store->checkpoint_ = config.checkpoint_quantization;
  store->tied_ = config.tie_word_embeddings;
  store->prefix_ = config.weight_prefix;
  store->fused_ = store_detail::FusedRows::of(config);
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
  if (GgufFile::is_gguf(options.model_dir)) {
    auto file = GgufFile::open(options.model_dir);
    if (!file) return file.error();
    store->gguf_ = std::make_shared<GgufFile>(std::move(*file));
    DType stored = DType::f16;  // the dtype of its float matrices, when it has any
    for (const GgufTensor& t : store->gguf_->tensors()) {
      if (t.dims.size() == 2 && gguf_float_dtype(t.type)) {
        stored = *gguf_float_dtype(t.type);
        break;
      }
    }
    store->served_ = requested ? *requested : stored;
    if (requested) store->convert_to_ = *requested;
    return store;
  }
  auto loader = WeightLoader::open(options.model_dir);
  if (!loader) return loader.error();
  store->file_.emplace(std::move(*loader));
  const DType stored = store->file_->first_dtype().value_or(DType::f32);
  store->served_ = requested ? *requested : stored;
  if (requested) store->convert_to_ = *requested;
  return store;
}

using store_detail::checkpoint_prefix;
using store_detail::named;
using store_detail::resolve;

bool WeightStore::stored(const std::string& name) const {
  if (file_ && checkpoint_.enabled() && file_->contains(checkpoint_prefix(name) + "qweight")) return true;
  if (file_) return file_->contains(name);
  if (gguf_) {
    const auto gguf_name = gguf_tensor_name(*gguf_, name);
    return gguf_name && gguf_->tensor(*gguf_name);
  }
  return name != prefix_ + "lm_head.weight" || !tied_;
}

std::optional<store_detail::FusedPart> WeightStore::stored_fused(const std::string& name) const {
  auto part = store_detail::fused_part(name, fused_);
  if (part && stored(part->stored)) return part;
  return std::nullopt;
}

bool WeightStore::contains(const std::string& name) const {
  const std::string full = prefix_ + name;
  return stored(full) || stored_fused(full);
}

Result<WeightStore::Located> WeightStore::locate(const std::string& name, int64_t rows, int64_t cols,
                                                 MatrixSlice slice) const {
  const std::string full = prefix_ + name;
  if (stored(full)) return Located{full, rows, slice};
  if (const auto part = stored_fused(full)) {
    auto s = resolve(name, rows, cols, slice);
    if (!s) return s.error();
    s->row_first += part->first_row;
    return Located{part->stored, part->stored_rows, *s};
  }
  return Located{full, rows, slice};  // reading it says what is missing
}

const void* WeightStore::own(std::vector<unsigned char> bytes) {
  owned_.push_back(std::move(bytes));
  return owned_.back().data();
}

namespace {

// fn(first, last) over [0, n) in parts on the machine's cores when n is large (dummy weights of big models).
template <class F>
void in_parallel_parts(size_t n, const F& fn) {
  const size_t parts = n < (size_t(1) << 22) ? 1 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  std::vector<std::thread> helpers;
  for (size_t p = 1; p < parts; ++p) helpers.emplace_back(fn, n * p / parts, n * (p + 1) / parts);
  fn(0, n / parts);
  for (std::thread& t : helpers) t.join();
}

// Seeded values: norm weights near 1, everything else small and centred, like a freshly initialised model. Element
// i of a tensor draws from key + (i + 1) * golden alone, so any part of a matrix is made without the rest, in
// parallel, with the same values.
struct DummyValues {
  uint64_t key;
  bool is_norm;
  DummyValues(const std::string& name, uint64_t seed)
      : key(std::hash<std::string>{}(name) ^ (seed * 0x9e3779b97f4a7c15ull)),
        is_norm(name.find("norm") != std::string::npos) {}
  float operator()(size_t i) const {
    const float u = static_cast<float>(uniform_from_key(key + (i + 1) * 0x9e3779b97f4a7c15ull)) * 2.0f - 1.0f;
    return is_norm ? 1.0f + 0.1f * u : 0.035f * u;  // u in [-1, 1): std ~0.02 off the norms
  }
};

}  // namespace

std::vector<float> WeightStore::dummy_values(const std::string& name, size_t n) const {
  const DummyValues value(name, seed_);
  std::vector<float> v(n);
  in_parallel_parts(n, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) v[i] = value(i);
  });
  return v;
}

std::vector<unsigned char> WeightStore::dummy_slice(const std::string& name, int64_t cols, const MatrixSlice& s,
                                                    DType dtype) const {
  const DummyValues value(name, seed_);
  const size_t esize = dtype_size(dtype), width = size_t(s.col_count), n = size_t(s.row_count) * width;
  std::vector<unsigned char> bytes(n * esize);
  in_parallel_parts(n, [&](size_t first, size_t last) {
    float chunk[1024];
    for (size_t at = first; at < last; at += std::size(chunk)) {
      const size_t count = std::min(std::size(chunk), last - at);
      for (size_t e = 0; e < count; ++e) {
        const size_t r = (at + e) / width, c = (at + e) % width;
        chunk[e] = value((size_t(s.row_first) + r) * size_t(cols) + size_t(s.col_first) + c);
      }
      convert_from_f32(dtype, chunk, bytes.data() + at * esize, count);
    }
  });
  return bytes;
}

namespace store_detail {

std::string checkpoint_prefix(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
  return name.substr(0, name.size() - suffix.size() + 1);
}

Result<MatrixSlice> resolve(const std::string& name, int64_t rows, int64_t cols, MatrixSlice s) {
  if (s.row_count < 0) s.row_count = rows - s.row_first;
  if (s.col_count < 0) s.col_count = cols - s.col_first;
  if (s.row_first < 0 || s.col_first < 0 || s.row_count <= 0 || s.col_count <= 0 || s.row_first + s.row_count > rows ||
      s.col_first + s.col_count > cols) {
    return make_error(Errc::invalid_argument,
                      name + ": shard rows [" + std::to_string(s.row_first) + ", +" + std::to_string(s.row_count) +
                          ") cols [" + std::to_string(s.col_first) + ", +" + std::to_string(s.col_count) +
                          ") is outside its shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  return s;
}

Error named(const std::string& name, const Error& e) { return Error{e.code, name + ": " + e.message}; }

}  // namespace store_detail

namespace {

// The slice of a row-major [rows, cols] f32 matrix.
std::vector<float> cut(const std::vector<float>& full, int64_t cols, const MatrixSlice& s) {
  std::vector<float> out(static_cast<size_t>(s.row_count * s.col_count));
  for (int64_t r = 0; r < s.row_count; ++r) {
    std::copy_n(full.data() + (s.row_first + r) * cols + s.col_first, s.col_count,
                out.data() + r * s.col_count);
  }
  return out;
}

}  // namespace

Result<exec::Weight> WeightStore::weight(exec::Backend& backend, const std::string& hf_name, int64_t hf_rows,
                                         int64_t cols, exec::WeightUse use, MatrixSlice hf_slice) {
  auto at = locate(hf_name, hf_rows, cols, hf_slice);
  if (!at) return at.error();
  const std::string& name = at->name;
  const int64_t rows = at->rows;
  const MatrixSlice slice = at->slice;
  if (gguf_) return gguf_weight(backend, name, rows, cols, use, slice);
  auto checkpoint = checkpoint_matrix(name, rows, cols, slice);
  if (!checkpoint) return checkpoint.error();
  if (*checkpoint) {
    auto w = backend.upload_quantized(**checkpoint);
    if (!w) return named(name, w.error());
    return w;
  }
  const TensorView* from_file = nullptr;
  auto m = row_major(name, rows, cols, slice, &from_file);
  if (!m) return m.error();
  if (use == exec::WeightUse::gemm && quant_.enabled()) {
    const QuantizedMatrix q = quantize(m->dtype, m->data, m->rows, m->cols, m->row_stride, quant_);
    drop_row_major(from_file);
    auto w = backend.upload_quantized(q);
    if (!w) return named(name, w.error());
    return w;
  }
  auto w = backend.upload_matrix(*m, use);
  if (!w) return named(name, w.error());
  if (!backend.keeps_host_view(use)) drop_row_major(from_file);
  return w;
}

Result<exec::Weight> WeightStore::glu_weight(exec::Backend& backend, const std::string& gate_name,
                                             const std::string& up_name, int64_t ff, int64_t cols, int64_t row_first,
                                             int64_t row_count) {
  const MatrixSlice row_slice{row_first, row_count};
  auto gate_at = locate(gate_name, ff, cols, row_slice);
  if (!gate_at) return gate_at.error();
  auto up_at = locate(up_name, ff, cols, row_slice);
  if (!up_at) return up_at.error();
  const Located &g = *gate_at, &u = *up_at;
  if (gguf_) return gguf_glu_weight(backend, g, u, cols);
  auto gate_q = checkpoint_matrix(g.name, g.rows, cols, g.slice);
  if (!gate_q) return gate_q.error();
  if (*gate_q) {
    auto up_q = checkpoint_matrix(u.name, u.rows, cols, u.slice);
    if (!up_q) return up_q.error();
    if (!*up_q) return make_error(Errc::parse_error, up_name + " is not quantized while " + gate_name + " is");
    auto fused = backend.upload_quantized_glu(**gate_q, **up_q);
    if (!fused) return named(gate_name, fused.error());
    return fused;
  }
  const TensorView* gate_file = nullptr;
  const TensorView* up_file = nullptr;
  auto gate = row_major(g.name, g.rows, cols, g.slice, &gate_file);
  if (!gate) return gate.error();
  auto up = row_major(u.name, u.rows, cols, u.slice, &up_file);
  if (!up) {
    drop_row_major(gate_file);
    return up.error();
  }
  if (quant_.enabled()) {
    const QuantizedMatrix qg = quantize(gate->dtype, gate->data, gate->rows, gate->cols, gate->row_stride, quant_);
    const QuantizedMatrix qu = quantize(up->dtype, up->data, up->rows, up->cols, up->row_stride, quant_);
    drop_row_major(up_file);
    drop_row_major(gate_file);
    auto fused = backend.upload_quantized_glu(qg, qu);
    if (!fused) return named(gate_name, fused.error());
    return fused;
  }
  auto fused = backend.upload_glu(*gate, *up);
  drop_row_major(up_file);
  drop_row_major(gate_file);
  if (!fused) return named(gate_name, fused.error());
  return fused;
}

void WeightStore::drop_row_major(const TensorView* from_file) {
  if (from_file) {
    release_pages(*from_file);
  } else {
    owned_.pop_back();
  }
}

Result<exec::HostMatrix> WeightStore::row_major(const std::string& name, int64_t rows, int64_t cols,
                                                 MatrixSlice slice, const TensorView** from_file) {
  auto s = resolve(name, rows, cols, slice);
  if (!s) return s.error();
  const bool whole = s->row_count == rows && s->col_count == cols;
  exec::HostMatrix m;
  m.rows = s->row_count;
  m.cols = s->col_count;
  auto own_f32 = [&](const std::vector<float>& values, DType dtype) {
    std::vector<unsigned char> bytes(values.size() * dtype_size(dtype));
    in_parallel_parts(values.size(), [&](size_t first, size_t last) {
      convert_from_f32(dtype, values.data() + first, bytes.data() + first * dtype_size(dtype), last - first);
    });
    m.dtype = dtype;
    m.data = own(std::move(bytes));
  };
  if (!file_) {
    // The slice's values of the full matrix: a shard holds exactly the values of the unsharded model.
    m.dtype = served_;
    m.data = own(dummy_slice(name, cols, *s, served_));
    return m;
  }
  auto view = file_->view(name, {rows, cols});
  if (!view) return view.error();
  const DType stored = (*view)->dtype;
  if ((!convert_to_ || *convert_to_ == stored) && s->col_count == cols) {
    // Whole rows in the stored dtype: a view of the file.
    m.dtype = stored;
    m.data = (*view)->data + static_cast<size_t>(s->row_first * cols) * dtype_size(stored);
    *from_file = *view;
    return m;
  }
  std::vector<float> f32((*view)->num_elements());
  convert_to_f32(**view, f32.data());
  own_f32(whole ? f32 : cut(f32, cols, *s), convert_to_ ? *convert_to_ : stored);
  return m;
}

Result<std::vector<float>> WeightStore::vector_f32(const std::string& hf_name, int64_t hf_n, int64_t first,
                                                   int64_t count) {
  // A vector is located as a matrix of one column (a fused bias's part is a range of its elements).
  auto at = locate(hf_name, hf_n, 1, MatrixSlice{first, count, 0, 1});
  if (!at) return at.error();
  const std::string& name = at->name;
  const int64_t n = at->rows;
  auto s = resolve(name, 1, n, MatrixSlice{0, 1, at->slice.row_first, at->slice.row_count});
  if (!s) return s.error();
  std::vector<float> v;
  if (gguf_) {
    const auto gguf_name = gguf_tensor_name(*gguf_, name);
    const GgufTensor* t = gguf_name ? gguf_->tensor(*gguf_name) : nullptr;
    if (!t) return make_error(Errc::not_found, "tensor " + name + " not found in " + gguf_->path().string());
    if (t->elements() != n) {
      return make_error(Errc::invalid_argument, name + " (GGUF " + t->name + "): expected " + std::to_string(n) +
                                                    " values, found " + std::to_string(t->elements()));
    }
    auto values = gguf_values_f32(*t);
    if (!values) return values.error();
    v = std::move(*values);
    if (const float shift = gguf_norm_shift(*gguf_, name); shift != 0.0f) {
      for (float& x : v) x -= shift;  // HF's stored weight
    }
  } else if (!file_) {
    v = dummy_values(name, static_cast<size_t>(n));
    // Round through the served dtype so dummy models behave like files of that dtype.
    std::vector<unsigned char> bytes(v.size() * dtype_size(served_));
    convert_from_f32(served_, v.data(), bytes.data(), v.size());
    convert_to_f32(served_, bytes.data(), v.data(), v.size());
  } else {
    auto loaded = file_->load_f32(name, {n});
    if (!loaded) return loaded.error();
    v = std::move(*loaded);
  }
  if (s->col_count == n) return v;
  return std::vector<float>(v.begin() + s->col_first, v.begin() + s->col_first + s->col_count);
}

}  // namespace actord
