#include "apps/actord/bench_serve_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace actord::cli {
namespace {

constexpr double kPanelW = 460, kPanelH = 300, kLeft = 60, kTop = 50, kGap = 90;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A panel's frame at x0: its box, title and axis labels.
std::string frame(double x0, const std::string& title, const std::string& x_label, const std::string& y_label) {
  std::string s = "<rect x=\"" + fmt("%.1f", x0) + "\" y=\"" + fmt("%.1f", kTop) + "\" width=\"" + fmt("%.1f", kPanelW) +
                  "\" height=\"" + fmt("%.1f", kPanelH) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  s += "<text x=\"" + fmt("%.1f", x0 + kPanelW / 2) + "\" y=\"" + fmt("%.1f", kTop - 10) +
       "\" text-anchor=\"middle\" font-weight=\"bold\">" + escape(title) + "</text>\n";
  s += "<text x=\"" + fmt("%.1f", x0 + kPanelW / 2) + "\" y=\"" + fmt("%.1f", kTop + kPanelH + 38) +
       "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n";
  s += "<text transform=\"translate(" + fmt("%.1f", x0 - 45) + "," + fmt("%.1f", kTop + kPanelH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + escape(y_label) + "</text>\n";
  return s;
}

std::string tick(double x, double y, bool vertical_axis, const std::string& label) {
  std::string s;
  if (vertical_axis) {
    s += "<line x1=\"" + fmt("%.1f", x - 4) + "\" y1=\"" + fmt("%.1f", y) + "\" x2=\"" + fmt("%.1f", x) + "\" y2=\"" +
         fmt("%.1f", y) + "\" stroke=\"#444\"/>";
    s += "<text x=\"" + fmt("%.1f", x - 6) + "\" y=\"" + fmt("%.1f", y + 4) + "\" text-anchor=\"end\">" + label + "</text>\n";
  } else {
    s += "<line x1=\"" + fmt("%.1f", x) + "\" y1=\"" + fmt("%.1f", y) + "\" x2=\"" + fmt("%.1f", x) + "\" y2=\"" +
         fmt("%.1f", y + 4) + "\" stroke=\"#444\"/>";
    s += "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y + 18) + "\" text-anchor=\"middle\">" + label + "</text>\n";
  }
  return s;
}

std::string ms_label(double ms) {
  if (ms >= 1000) return fmt("%g", ms / 1000) + " s";
  return fmt("%g", ms) + " ms";
}

std::string cdf_panel(const RunPlot& run) {
  const double x0 = kLeft;
  std::string s = frame(x0, "Latency CDF", "latency (log scale)", "fraction of samples");
  double lo = 1e300, hi = 0;
  for (const auto& [name, v] : run.latencies_ms) {
    for (double ms : v) {
      if (ms <= 0) continue;
      lo = std::min(lo, ms);
      hi = std::max(hi, ms);
    }
  }
  for (int i = 0; i <= 4; ++i) s += tick(x0, kTop + kPanelH * (1 - i / 4.0), true, fmt("%.2f", i / 4.0));
  if (hi <= 0) return s;
  lo = std::max(lo, 0.01);  // events read together arrive "0 ms" apart: the axis starts at 10 us
  hi = std::max(hi, lo);
  const double a = std::floor(std::log10(lo)), b = std::max(a + 1, std::ceil(std::log10(hi)));
  auto x_of = [&](double ms) { return x0 + kPanelW * (std::log10(std::max(ms, lo)) - a) / (b - a); };
  for (double e = a; e <= b; ++e) s += tick(x_of(std::pow(10, e)), kTop + kPanelH, false, ms_label(std::pow(10, e)));
  size_t color = 0, legend = 0;
  for (const auto& [name, samples] : run.latencies_ms) {
    if (samples.empty()) continue;
    std::vector<double> v = samples;
    std::sort(v.begin(), v.end());
    const char* c = kColors[color++ % std::size(kColors)];
    std::string points;
    const size_t step = std::max<size_t>(1, v.size() / 400);  // at most ~400 points a curve
    for (size_t i = 0; i < v.size(); i += step) {
      points += fmt("%.1f", x_of(v[i])) + "," + fmt("%.1f", kTop + kPanelH * (1 - double(i + 1) / double(v.size()))) + " ";
    }
    points += fmt("%.1f", x_of(v.back())) + "," + fmt("%.1f", kTop) + " ";
    s += "<polyline fill=\"none\" stroke=\"" + std::string(c) + "\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n";
    const double ly = kTop + 16 + 16 * double(legend++);
    s += "<line x1=\"" + fmt("%.1f", x0 + 10) + "\" y1=\"" + fmt("%.1f", ly - 4) + "\" x2=\"" + fmt("%.1f", x0 + 30) +
         "\" y2=\"" + fmt("%.1f", ly - 4) + "\" stroke=\"" + c + "\" stroke-width=\"2\"/>";
    s += "<text x=\"" + fmt("%.1f", x0 + 34) + "\" y=\"" + fmt("%.1f", ly) + "\">" + escape(name) + "</text>\n";
  }
  return s;
}

std::string throughput_panel(const RunPlot& run) {
  const double x0 = kLeft + kPanelW + kGap;
  std::string s = frame(x0, "Output tokens per second", "time since start (s)", "tokens/s");
  const double duration = run.duration_s > 0 ? run.duration_s : 1;
  const int bins = std::clamp(static_cast<int>(duration / 0.05), 1, 60);
  const double width = duration / bins;
  std::vector<double> rate(static_cast<size_t>(bins), 0);
  for (double t : run.token_times_s) {
    const int b = std::clamp(static_cast<int>(t / width), 0, bins - 1);
    rate[static_cast<size_t>(b)] += 1 / width;
  }
  const double peak = std::max(1.0, *std::max_element(rate.begin(), rate.end()));
  const double magnitude = std::pow(10, std::floor(std::log10(peak)));
  const double top = std::ceil(peak / magnitude) * magnitude;
  auto count_label = [](double v) { return v >= 1000 ? fmt("%gk", v / 1000) : fmt("%g", v); };
  for (int i = 0; i <= 4; ++i) s += tick(x0, kTop + kPanelH * (1 - i / 4.0), true, count_label(top * i / 4.0));
  for (int i = 0; i <= 4; ++i) s += tick(x0 + kPanelW * i / 4.0, kTop + kPanelH, false, fmt("%.3g", duration * i / 4.0));
  std::string points;
  for (int b = 0; b < bins; ++b) {
    const double y = kTop + kPanelH * (1 - rate[static_cast<size_t>(b)] / top);
    points += fmt("%.1f", x0 + kPanelW * b / bins) + "," + fmt("%.1f", y) + " " +
              fmt("%.1f", x0 + kPanelW * (b + 1) / bins) + "," + fmt("%.1f", y) + " ";
  }
  s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n";
  return s;
}

}  // namespace

std::string plot_svg(const RunPlot& run) {
  const double width = kLeft + 2 * kPanelW + kGap + 30, height = kTop + kPanelH + 60;
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  fmt("%.0f", width) + "\" height=\"" + fmt("%.0f", height + 20) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt("%.1f", width / 2) + "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" + escape(run.title) +
       "</text>\n";
  s += cdf_panel(run);
  s += throughput_panel(run);
  s += "</svg>\n";
  return s;
}

}  // namespace actord::cli
