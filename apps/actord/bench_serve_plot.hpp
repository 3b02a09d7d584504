// The picture of an `actord bench serve` run, as one SVG document: the latency CDFs (TTFT, TPOT, ITL, E2E, on a
// logarithmic millisecond axis) beside the output tokens per second over the run.
//
// Contract: plain SVG 1.1 with no script or external reference; empty series are left out of the CDF panel and an
// empty run gives empty panels, never an error. Token times are seconds since the run started.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace actord::cli {

struct RunPlot {
  std::string title;
  std::vector<std::pair<std::string, std::vector<double>>> latencies_ms;  // name, samples
  std::vector<double> token_times_s;
  double duration_s = 0;
};

std::string plot_svg(const RunPlot& run);

}  // namespace actord::cli
