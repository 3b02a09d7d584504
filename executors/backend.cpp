#include "executors/backend.hpp"

#include <algorithm>

namespace actord::exec {

void Backend::reserve(Buffer& b, size_t n) {
  if (b.size_ >= n) return;
  const size_t grown = std::max(n, b.size_ + b.size_ / 2);  // a step that grows by a few tokens does not reallocate
  Allocation a = allocate(grown);
  b.data_ = a.data;
  b.size_ = grown;
  b.owner_ = std::move(a.owner);
}

std::optional<Buffer> Backend::host_view(std::span<float> host) const {
  if (!computes_in_host_memory()) return std::nullopt;
  Buffer b;
  b.data_ = host.data();
  b.size_ = host.size();
  return b;
}

Buffer Backend::upload(std::span<const float> host) {
  Buffer b;
  if (host.empty()) return b;
  reserve(b, host.size());  // an empty buffer grows to exactly n
  upload_into(host, b);
  return b;
}

}  // namespace actord::exec
