// What this machine can give: memory available to a new allocation, its page size, and byte counts written for
// people.
//
// Contract: available_host_memory() is /proc/meminfo's MemAvailable (the kernel's estimate of what can be allocated
// without swapping), or nullopt where it cannot be read. page_bytes() is the kernel's page size (sysconf; 4096 where
// it cannot say). drop_file_pages(data, bytes) tells the kernel (MADV_DONTNEED) that the whole pages inside
// [data, data + bytes) of a read-only file mapping are not needed any more: they leave memory and would be read from
// the file again if touched; the partial pages at either end stay. format_bytes(1536 << 20) is "1.50 GiB".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace actord {

std::optional<uint64_t> available_host_memory();
size_t page_bytes();
void drop_file_pages(const void* data, size_t bytes);
std::string format_bytes(uint64_t bytes);

}  // namespace actord
