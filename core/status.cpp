#include "core/status.hpp"

namespace actord {

const char* errc_name(Errc code) {
  switch (code) {
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::invalid_config: return "invalid_config";
    case Errc::not_found: return "not_found";
    case Errc::unsupported: return "unsupported";
    case Errc::parse_error: return "parse_error";
    case Errc::resource_exhausted: return "resource_exhausted";
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::worker_failed: return "worker_failed";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

}  // namespace actord
