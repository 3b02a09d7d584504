#include "memory/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>

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
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(view.data);
  const uintptr_t end = begin + view.num_elements() * dtype_size(view.dtype);
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
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

  const auto* base = static_cast<const std::byte*>(map);
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
  } catch (const std::exception& e) {
    return make_error(Errc::parse_error, where + ": malformed safetensors header: " + e.what());
  }
  if (!header.is_object()) return make_error(Errc::parse_error, where + ": safetensors header is not an object");

  const std::byte* data = base + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const std::string dt = info.at("dtype").get<std::string>();
      TensorView view;
      if (dt == "F32") view.dtype = DType::f32;
      else if (dt == "F16") view.dtype = DType::f16;
      else if (dt == "BF16") view.dtype = DType::bf16;
      else return make_error(Errc::unsupported, where + ": tensor '" + name + "' has unsupported dtype " + dt);
      view.shape = info.at("shape").get<std::vector<int64_t>>();
      const auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1]) {
        return make_error(Errc::parse_error, where + ": tensor '" + name + "' has bad data_offsets");
      }
      if (offsets[1] > data_size) {
        return make_error(Errc::parse_error, where + ": truncated safetensors file: tensor '" + name +
                                                 "' ends at byte " + std::to_string(offsets[1]) + " of " +
                                                 std::to_string(data_size) + " data bytes");
      }
      for (int64_t d : view.shape) {
        if (d < 0) return make_error(Errc::parse_error, where + ": tensor '" + name + "' has a negative dimension");
      }
      if (view.num_elements() * dtype_size(view.dtype) != offsets[1] - offsets[0]) {
        return make_error(Errc::parse_error, where + ": tensor '" + name + "' size does not match its shape");
      }
      view.data = data + offsets[0];
      file.tensors_.emplace(name, std::move(view));
    } catch (const std::exception& e) {
      return make_error(Errc::parse_error, where + ": tensor '" + name + "': malformed entry: " + e.what());
    }
  }
  return file;
}

}  // namespace actord
