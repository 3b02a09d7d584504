// Writes GGUF v3 files for tests: metadata of every kind, tensors in F32 / F16 and in the quantized block formats
// (Q8_0, Q4_0, Q4_K, Q6_K) encoded from f32 values, and a Hugging Face folder (stories260K) converted as llama.cpp's
// converter does (q and k rows in its interleaved order, the SentencePiece vocabulary with scores and types).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "core/gguf.hpp"

namespace actord::test {

class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& v) { key_of(key, 8); str(meta_, v); ++keys_; }
  void add_u32(const std::string& key, uint32_t v) { key_of(key, 4); put(meta_, v); ++keys_; }
  void add_f32(const std::string& key, float v) { key_of(key, 6); put(meta_, v); ++keys_; }
  void add_bool(const std::string& key, bool v) { key_of(key, 7); put(meta_, uint8_t(v)); ++keys_; }
  void add_strings(const std::string& key, const std::vector<std::string>& v) {
    array_of(key, 8, v.size());
    for (const auto& s : v) str(meta_, s);
  }
  void add_f32s(const std::string& key, const std::vector<float>& v) {
    array_of(key, 6, v.size());
    for (float x : v) put(meta_, x);
  }
  void add_bools(const std::string& key, const std::vector<bool>& v) {
    array_of(key, 7, v.size());
    for (bool x : v) put(meta_, uint8_t(x));
  }
  void add_i32s(const std::string& key, const std::vector<int32_t>& v) {
    array_of(key, 5, v.size());
    for (int32_t x : v) put(meta_, x);
  }
  // A tensor of `rows` x `cols` f32 values stored as `type` (rows of cols: fastest dimension first in the file).
  // `stacked` > 1: a 3-D tensor of that many [rows / stacked, cols] matrices (a mixture's experts).
  void add_tensor(const std::string& name, int64_t rows, int64_t cols, const float* values, GgmlType type,
                  int64_t stacked = 1) {
    std::vector<unsigned char> bytes;
    for (int64_t r = 0; r < rows; ++r) encode_row(values + r * cols, cols, type, bytes);
    std::vector<int64_t> dims = rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
    if (stacked > 1) dims = {cols, rows / stacked, stacked};
    Tensor t{name, std::move(dims), type, std::move(bytes)};
    tensors_.push_back(std::move(t));
  }
  void write(const std::filesystem::path& path) const {
    std::vector<unsigned char> out;
    put(out, uint32_t(0x46554747));
    put(out, uint32_t(3));
    put(out, uint64_t(tensors_.size()));
    put(out, keys_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      str(out, t.name);
      put(out, uint32_t(t.dims.size()));
      for (int64_t d : t.dims) put(out, uint64_t(d));
      put(out, uint32_t(t.type));
      put(out, offset);
      offset += (t.bytes.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, 0);
    for (const Tensor& t : tensors_) {
      out.insert(out.end(), t.bytes.begin(), t.bytes.end());
      out.resize((out.size() + 31) / 32 * 32, 0);
    }
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  }

  // The values a block format gives back for `values` (its own rounding), as a GGUF reader must decode them.
  static std::vector<float> round_trip(const std::vector<float>& values, GgmlType type) {
    std::vector<unsigned char> bytes;
    encode_row(values.data(), static_cast<int64_t>(values.size()), type, bytes);
    return decode_reference(bytes, static_cast<int64_t>(values.size()), type);
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::vector<unsigned char> bytes;
  };
  template <class T>
  static void put(std::vector<unsigned char>& out, T v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void str(std::vector<unsigned char>& out, const std::string& s) {
    put(out, uint64_t(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  void key_of(const std::string& key, uint32_t type) {
    str(meta_, key);
    put(meta_, type);
  }
  void array_of(const std::string& key, uint32_t element, size_t n) {
    key_of(key, 9);
    put(meta_, element);
    put(meta_, uint64_t(n));
    ++keys_;
  }
  static void half(std::vector<unsigned char>& out, float v) { put(out, f32_to_f16(v)); }

  static void encode_row(const float* v, int64_t n, GgmlType type, std::vector<unsigned char>& out) {
    switch (type) {
      case GgmlType::f32:
        for (int64_t i = 0; i < n; ++i) put(out, v[i]);
        return;
      case GgmlType::f16:
        for (int64_t i = 0; i < n; ++i) half(out, v[i]);
        return;
      case GgmlType::q8_0:
        for (int64_t b = 0; b < n; b += 32) {
          float amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b + j]));
          const float d = f16_to_f32(f32_to_f16(amax / 127.0f));
          half(out, d);
          for (int j = 0; j < 32; ++j) put(out, int8_t(d > 0 ? std::nearbyint(v[b + j] / d) : 0));
        }
        return;
      case GgmlType::q4_0:
        for (int64_t b = 0; b < n; b += 32) {
          float m = 0;
          for (int j = 0; j < 32; ++j) if (std::fabs(v[b + j]) > std::fabs(m)) m = v[b + j];
          const float d = f16_to_f32(f32_to_f16(m / -8.0f));
          half(out, d);
          auto code = [&](int j) { return int(std::clamp(d != 0 ? std::nearbyint(v[b + j] / d) + 8 : 8.0f, 0.0f, 15.0f)); };
          for (int j = 0; j < 16; ++j) put(out, uint8_t(code(j) | code(j + 16) << 4));
        }
        return;
      case GgmlType::q5_0:
      case GgmlType::q5_1:
        for (int64_t b = 0; b < n; b += 32) {  // llama.cpp's reference quantizers
          float lo = v[b], hi = v[b], m = 0;
          for (int j = 0; j < 32; ++j) {
            lo = std::min(lo, v[b + j]), hi = std::max(hi, v[b + j]);
            if (std::fabs(v[b + j]) > std::fabs(m)) m = v[b + j];
          }
          const bool affine = type == GgmlType::q5_1;
          const float d = f16_to_f32(f32_to_f16(affine ? (hi - lo) / 31.0f : m / -16.0f));
          half(out, d);
          if (affine) half(out, lo);
          const float base = affine ? f16_to_f32(f32_to_f16(lo)) : 0.0f;
          auto code = [&](int j) {
            if (d == 0) return affine ? 0 : 16;
            return int(std::clamp(std::nearbyint((v[b + j] - base) / d) + (affine ? 0.0f : 16.0f), 0.0f, 31.0f));
          };
          uint32_t qh = 0;
          for (int j = 0; j < 16; ++j) qh |= uint32_t(code(j) >> 4) << j | uint32_t(code(j + 16) >> 4) << (j + 16);
          put(out, qh);
          for (int j = 0; j < 16; ++j) put(out, uint8_t((code(j) & 15) | (code(j + 16) & 15) << 4));
        }
        return;
      case GgmlType::q4_k:
        for (int64_t b = 0; b < n; b += 256) {
          float scale[8], mins[8];
          for (int s = 0; s < 8; ++s) {
            float lo = 0, hi = 0;  // the range always includes 0 (mins >= 0), as llama.cpp's quantizer keeps it
            for (int j = 0; j < 32; ++j) lo = std::min(lo, v[b + 32 * s + j]), hi = std::max(hi, v[b + 32 * s + j]);
            scale[s] = (hi - lo) / 15.0f;
            mins[s] = -lo;
          }
          const float d = f16_to_f32(f32_to_f16(*std::max_element(scale, scale + 8) / 63.0f));
          const float dmin = f16_to_f32(f32_to_f16(*std::max_element(mins, mins + 8) / 63.0f));
          int sc[8], mn[8];
          for (int s = 0; s < 8; ++s) {
            sc[s] = d > 0 ? std::min(63, int(std::nearbyint(scale[s] / d))) : 0;
            mn[s] = dmin > 0 ? std::min(63, int(std::nearbyint(mins[s] / dmin))) : 0;
          }
          half(out, d);
          half(out, dmin);
          unsigned char packed[12];
          for (int j = 0; j < 4; ++j) {
            packed[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
            packed[j + 4] = uint8_t((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
            packed[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
          }
          out.insert(out.end(), packed, packed + 12);
          auto code = [&](int s, int j) {
            const float step = d * sc[s];
            return step > 0 ? int(std::clamp(std::nearbyint((v[b + 32 * s + j] + dmin * mn[s]) / step), 0.0f, 15.0f)) : 0;
          };
          for (int chunk = 0; chunk < 4; ++chunk)
            for (int l = 0; l < 32; ++l) put(out, uint8_t(code(2 * chunk, l) | code(2 * chunk + 1, l) << 4));
        }
        return;
      case GgmlType::q6_k:
        for (int64_t b = 0; b < n; b += 256) {
          float scale[16];
          for (int s = 0; s < 16; ++s) {
            float m = 0;
            for (int j = 0; j < 16; ++j) if (std::fabs(v[b + 16 * s + j]) > std::fabs(m)) m = v[b + 16 * s + j];
            scale[s] = m / -32.0f;
          }
          float smax = 0;
          for (float s : scale) if (std::fabs(s) > std::fabs(smax)) smax = s;
          const float d = f16_to_f32(f32_to_f16(smax / -128.0f));
          int8_t sc[16];
          for (int s = 0; s < 16; ++s) sc[s] = int8_t(d != 0 ? std::clamp(std::nearbyint(scale[s] / d), -128.0f, 127.0f) : 0);
          int q[256];
          for (int i = 0; i < 256; ++i) {
            const float step = d * sc[i / 16];
            q[i] = step != 0 ? int(std::clamp(std::nearbyint(v[b + i] / step) + 32, 0.0f, 63.0f)) : 32;
          }
          unsigned char ql[128] = {}, qh[64] = {};
          for (int h = 0; h < 2; ++h) {
            const int* qq = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
              ql[64 * h + l] = uint8_t((qq[l] & 15) | (qq[l + 64] & 15) << 4);
              ql[64 * h + l + 32] = uint8_t((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
              qh[32 * h + l] = uint8_t((qq[l] >> 4) | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4 | (qq[l + 96] >> 4) << 6);
            }
          }
          out.insert(out.end(), ql, ql + 128);
          out.insert(out.end(), qh, qh + 64);
          for (int s = 0; s < 16; ++s) put(out, sc[s]);
          half(out, d);
        }
        return;
      default:
        throw std::runtime_error("GgufWriter: no encoder for this type");
    }
  }

  // The format's dequantization in double (the d * sc products unrounded), for comparisons.
  static std::vector<float> decode_reference(const std::vector<unsigned char>& bytes, int64_t n, GgmlType type) {
    std::vector<float> out(static_cast<size_t>(n));
    const unsigned char* p = bytes.data();
    auto h = [](const unsigned char* at) {
      uint16_t x;
      std::memcpy(&x, at, 2);
      return double(f16_to_f32(x));
    };
    switch (type) {
      case GgmlType::q8_0:
        for (int64_t b = 0; b < n; b += 32, p += 34)
          for (int j = 0; j < 32; ++j) out[b + j] = float(h(p) * int8_t(p[2 + j]));
        break;
      case GgmlType::q4_0:
        for (int64_t b = 0; b < n; b += 32, p += 18)
          for (int j = 0; j < 16; ++j) {
            out[b + j] = float(h(p) * ((p[2 + j] & 15) - 8));
            out[b + j + 16] = float(h(p) * ((p[2 + j] >> 4) - 8));
          }
        break;
      case GgmlType::q5_0:
      case GgmlType::q5_1: {
        const bool affine = type == GgmlType::q5_1;
        const int header = affine ? 4 : 2;
        for (int64_t b = 0; b < n; b += 32, p += header + 20) {
          uint32_t qh;
          std::memcpy(&qh, p + header, 4);
          for (int j = 0; j < 16; ++j) {
            const int x0 = (p[header + 4 + j] & 15) | ((qh >> j) & 1) << 4;
            const int x1 = (p[header + 4 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            out[b + j] = float(affine ? h(p) * x0 + h(p + 2) : h(p) * (x0 - 16));
            out[b + j + 16] = float(affine ? h(p) * x1 + h(p + 2) : h(p) * (x1 - 16));
          }
        }
        break;
      }
      case GgmlType::q4_k:
        for (int64_t b = 0; b < n; b += 256, p += 144) {
          const unsigned char* s = p + 4;
          for (int sub = 0; sub < 8; ++sub) {
            const int sc = sub < 4 ? s[sub] & 63 : (s[sub + 4] & 15) | (s[sub - 4] >> 6) << 4;
            const int mn = sub < 4 ? s[sub + 4] & 63 : (s[sub + 4] >> 4) | (s[sub] >> 6) << 4;
            for (int l = 0; l < 32; ++l) {
              const unsigned char byte = p[16 + 32 * (sub / 2) + l];
              const int q = sub % 2 ? byte >> 4 : byte & 15;
              out[b + 32 * sub + l] = float(h(p) * sc * q - h(p + 2) * mn);
            }
          }
        }
        break;
      case GgmlType::q6_k:
        for (int64_t b = 0; b < n; b += 256, p += 210) {
          for (int i = 0; i < 256; ++i) {
            const int half_ = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
            const unsigned char lo = p[64 * half_ + l + (quarter % 2) * 32];
            const int low = quarter < 2 ? lo & 15 : lo >> 4;
            const int high = (p[128 + 32 * half_ + l] >> (2 * quarter)) & 3;
            out[b + i] = float(h(p + 208) * int8_t(p[192 + i / 16]) * ((low | high << 4) - 32));
          }
        }
        break;
      default:
        throw std::runtime_error("GgufWriter: no reference decoder for this type");
    }
    return out;
  }

  std::vector<unsigned char> meta_;
  uint64_t keys_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace actord::test
