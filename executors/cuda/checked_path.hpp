// A faster path of the CUDA backend checked once against its trusted fallback (cuda_backend.cu, device_row_sampler):
// "unused" until then, "on" once they agreed, else "off: ..." and the fallback serves from then on (a wrong path costs
// speed, never tokens).
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

namespace actord::cuda {

struct CheckedPath {
  bool on = true, checked = false;
  std::string state = "unused";

  void disable(std::string why) {
    on = false;
    state = std::move(why);
  }
  // diff: max |path - fallback| and max |fallback| (max_difference). True when the path is kept.
  bool judge(const float diff[2], float tolerance, const char* what, const char* fallback, int device) {
    checked = true;
    if (diff[0] <= tolerance * std::max(1.0f, diff[1])) {
      state = "on";
      return true;
    }
    disable(std::string("off: differs from ") + fallback + " by " + std::to_string(diff[0]) + " (largest value " +
            std::to_string(diff[1]) + ")");
    std::fprintf(stderr, "cuda:%d: %s %s\n", device, what, state.c_str());
    return false;
  }
};

}  // namespace actord::cuda
