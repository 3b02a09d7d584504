#include "memory/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/host_memory.hpp"

namespace actord {

size_t TensorView::num_elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (map_) munmap(map_, map_size_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

void release_pages(const TensorView& view) {
  drop_file_pages(view.data, view.num_elements() * dtype_size(view.dtype));
}

namespace {

// A non-negative JSON integer that fits in T's non-negative range; nothing for anything else (floats, negatives,
// strings, too large).
template <class T>
std::optional<T> non_negative(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    return static_cast<T>(v.get<int64_t>());
  }
  return std::nullopt;
}

// A value for an error message: numbers and short strings as written, anything else by its type (dumping a deeply
// nested value would recurse as deep as the file nests).
std::string describe(const nlohmann::json& v) {
  if (v.is_number() || v.is_boolean() || v.is_null() || (v.is_string() && v.get_ref<const std::string&>().size() <= 40))
    return v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  const std::string type = v.type_name();
  return (type == "array" || type == "object" ? "an " : "a ") + type;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

}  // namespace

Result<std::map<std::string, TensorView>> parse_safetensors(const std::byte* base, size_t size, const std::string& where) {
  if (size < 8) {
    return make_error(Errc::parse_error, where + ": truncated safetensors file (" + std::to_string(size) + " bytes)");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > size - 8) {
    return make_error(Errc::parse_error, where + ": truncated safetensors file: header says " +
                                             std::to_string(header_len) + " bytes, file has " + std::to_string(size));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(base + 8),
                                   reinterpret_cast<const char*>(base + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::parse_error, where + ": malformed safetensors header: " + e.what());
  }
  if (!header.is_object()) return make_error(Errc::parse_error, where + ": safetensors header is not an object");

  const std::byte* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::map<std::string, TensorView> tensors;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string tensor = where + ": tensor '" + name + "'";
    if (!info.is_object()) return make_error(Errc::parse_error, tensor + ": malformed entry: not an object");
    const auto dtype = info.find("dtype");
    if (dtype == info.end() || !dtype->is_string())
      return make_error(Errc::parse_error, tensor + ": malformed entry: dtype must be a string");
    const std::string dt = dtype->get<std::string>();
    TensorView view;
    if (dt == "F32") view.dtype = DType::f32;
    else if (dt == "F16") view.dtype = DType::f16;
    else if (dt == "BF16") view.dtype = DType::bf16;
    else if (dt == "I32") view.int32 = true;  // 4 bytes, as f32
    else return make_error(Errc::unsupported, tensor + " has unsupported dtype " + dt);

    const auto shape = info.find("shape");
    if (shape == info.end() || !shape->is_array())
      return make_error(Errc::parse_error, tensor + ": malformed entry: shape must be a list of dimensions");
    for (const auto& d : *shape) {
      const auto dim = non_negative<int64_t>(d);
      if (!dim) {
        return make_error(Errc::parse_error, tensor + " has a bad dimension " + describe(d) +
                                                 " (dimensions are integers from 0 to 2^63 - 1)");
      }
      view.shape.push_back(*dim);
    }
    uint64_t bytes = dtype_size(view.dtype);
    for (int64_t dim : view.shape) {  // left to right, every partial product checked (as the safetensors crate)
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) {
        return make_error(Errc::parse_error,
                          tensor + ": shape " + dims_text(view.shape) + " of " + dt + " overflows 64 bits of bytes");
      }
    }

    const auto offsets = info.find("data_offsets");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2)
      return make_error(Errc::parse_error, tensor + " has bad data_offsets (must be [begin, end])");
    const auto begin = non_negative<uint64_t>((*offsets)[0]), end = non_negative<uint64_t>((*offsets)[1]);
    if (!begin || !end || *begin > *end)
      return make_error(Errc::parse_error, tensor + " has bad data_offsets [" + describe((*offsets)[0]) + ", " +
                                               describe((*offsets)[1]) + "] (must be integers with begin <= end)");
    if (*end > data_size) {
      return make_error(Errc::parse_error, where + ": truncated safetensors file: tensor '" + name + "' ends at byte " +
                                               std::to_string(*end) + " of " + std::to_string(data_size) +
                                               " data bytes");
    }
    if (*end - *begin != bytes) {
      return make_error(Errc::parse_error, tensor + " size does not match its shape: " + dims_text(view.shape) + " of " +
                                               dt + " is " + std::to_string(bytes) + " bytes, data_offsets span " +
                                               std::to_string(*end - *begin));
    }
    view.data = data + *begin;
    tensors.emplace(name, std::move(view));
  }
  return tensors;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string where = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::not_found, where + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return make_error(Errc::not_found, where + ": cannot stat: " + std::strerror(errno));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return make_error(Errc::parse_error, where + ": truncated safetensors file (" + std::to_string(size) + " bytes)");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return make_error(Errc::internal, where + ": mmap failed: " + std::strerror(errno));

  SafetensorsFile file;
  file.path_ = path;
  file.map_ = map;
  file.map_size_ = size;
  auto tensors = parse_safetensors(static_cast<const std::byte*>(map), size, where);
  if (!tensors) return tensors.error();
  file.tensors_ = std::move(*tensors);
  return file;
}

}  // namespace actord
