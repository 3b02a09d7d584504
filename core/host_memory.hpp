// What this machine can give: memory available to a new allocation, and byte counts written for people.
//
// Contract: available_host_memory() is /proc/meminfo's MemAvailable (the kernel's estimate of what can be allocated
// without swapping), or nullopt where it cannot be read. format_bytes(1536 << 20) is "1.50 GiB".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace actord {

std::optional<uint64_t> available_host_memory();
std::string format_bytes(uint64_t bytes);

}  // namespace actord
