#include "core/step_trace.hpp"

#include <fstream>

namespace actord {

const std::string& StepTrace::clock_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(in, line);
    return line;
  }();
  return id;
}

}  // namespace actord
