// RoPE's inverse frequencies and attention factor for each rope_scaling type, computed as Hugging Face computes
// them (f32 where it uses f32, double where Python does).
#include <algorithm>
#include <cmath>

#include "executors/cpu/kernels.hpp"
#include "plugins/model_config.hpp"

namespace actord {

namespace {

// YaRN's dimension whose wavelength turns `rotations` times over the original context.
double yarn_correction_dim(double rotations, int dim, double base, int original) {
  return dim * std::log(original / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

// YaRN: frequencies below the correction range are interpolated (divided by factor), those above kept, a linear
// ramp between.
void yarn_frequencies(const ModelConfig::RopeScaling& rs, int dim, float theta, float* inv) {
  double low = yarn_correction_dim(rs.beta_fast, dim, theta, rs.original_max_position_embeddings);
  double high = yarn_correction_dim(rs.beta_slow, dim, theta, rs.original_max_position_embeddings);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  for (int i = 0; i < dim / 2; ++i) {
    const float pos_freq = std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(dim));
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                  0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    inv[i] = 1.0f / (rs.factor * pos_freq) * (1.0f - extrapolation) + 1.0f / pos_freq * extrapolation;
  }
}

// The dimensions RoPE rotates (rotary_dim is set by load(); a config built in code may leave it 0: all of them).
int rotated(const ModelConfig& c) { return c.rotary_dim > 0 ? c.rotary_dim : c.head_dim; }

}  // namespace

std::vector<float> ModelConfig::rope_inv_freq(int context_length) const {
  const int dim = rotated(*this);
  std::vector<float> inv(static_cast<size_t>(head_dim / 2), 0.0f);
  cpu::rope_inv_freq(dim, rope_theta, inv.data());
  const RopeScaling& rs = rope_scaling;
  if (rs.type == "linear") {
    for (int i = 0; i < dim / 2; ++i) inv[size_t(i)] /= rs.factor;
  } else if (rs.type == "llama3") {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth blend in between.
    const float old_len = static_cast<float>(rs.original_max_position_embeddings);
    const float low_wavelen = old_len / rs.low_freq_factor;
    const float high_wavelen = old_len / rs.high_freq_factor;
    for (int i = 0; i < dim / 2; ++i) {
      float& f = inv[size_t(i)];
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0f - smooth) * f / rs.factor + smooth * f;
      }
    }
  } else if (rs.type == "longrope") {
    const int served = context_length > 0 ? context_length : max_position_embeddings;
    const std::vector<float>& ext = served > rs.original_max_position_embeddings ? rs.long_factor : rs.short_factor;
    for (int i = 0; i < dim / 2; ++i) {
      const float base = std::pow(rope_theta, static_cast<float>(2 * i) / static_cast<float>(dim));
      inv[size_t(i)] = 1.0f / (ext[size_t(i)] * base);
    }
  } else if (rs.type == "yarn") {
    yarn_frequencies(rs, dim, rope_theta, inv.data());
  }
  return inv;
}

float ModelConfig::rope_attention_factor() const {
  return rope_scaling.type == "longrope" || rope_scaling.type == "yarn" ? rope_scaling.attention_factor : 1.0f;
}

std::vector<float> ModelConfig::rope_inv_freq_local() const {
  if (rope_local_theta <= 0.0f) return rope_inv_freq();
  std::vector<float> inv(static_cast<size_t>(head_dim / 2), 0.0f);
  cpu::rope_inv_freq(rotated(*this), rope_local_theta, inv.data());
  return inv;
}

}  // namespace actord
