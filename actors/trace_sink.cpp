#include "actors/trace_sink.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comms/capnp_codec.hpp"
#include "core/step_trace.hpp"

namespace actord {

int TraceSink::pid_of(const std::string& track) {
  auto [it, added] = pids_.emplace(track, static_cast<int>(pids_.size()) + 1);
  return it->second;
}

void TraceSink::add_result(const wire_msg& result, uint64_t step_id, uint64_t sent_ns, uint64_t received_ns) {
  WireReader reader(result);
  auto r = reader.root<wire::StepResult>();
  if (!r.hasTrace()) return;
  std::lock_guard lock(mu_);
  const int pid = pid_of(std::string(r.getRank()));
  const bool foreign = r.getClockId().size() > 0 && std::string_view(r.getClockId().cStr()) != StepTrace::clock_id();
  if (foreign) {
    ClockSample& clock = clocks_[pid];
    for (auto s : r.getTrace()) {
      if (std::string_view(s.getName().cStr()) != "step" || received_ns <= sent_ns || sent_ns == 0) continue;
      const uint64_t round_trip = received_ns - sent_ns, inside = s.getDurNs();
      const uint64_t slack = round_trip > inside ? round_trip - inside : 0;
      if (slack >= clock.slack_ns) continue;
      clock.slack_ns = slack;
      // (worker start - send) and (worker end - receive) straddle the offset by the two legs' times.
      const int64_t start = static_cast<int64_t>(s.getStartNs()), end = start + static_cast<int64_t>(inside);
      clock.offset_ns = ((start - static_cast<int64_t>(sent_ns)) + (end - static_cast<int64_t>(received_ns))) / 2;
    }
  }
  for (auto s : r.getTrace()) {
    Span span;
    span.pid = pid;
    span.name = s.getName();
    span.category = s.getCategory();
    span.start_ns = s.getStartNs();
    span.dur_ns = s.getDurNs();
    span.bytes = s.getBytes();
    span.layer = s.getLayer();
    span.tid = static_cast<int>(s.getMicroBatch());
    span.step = step_id;
    spans_.push_back(std::move(span));
  }
}

void TraceSink::add_scheduler_step(const std::string& scheduler, uint64_t step_id, uint64_t start_ns,
                                   uint64_t end_ns, const StepShape& shape, uint64_t share_us) {
  std::lock_guard lock(mu_);
  Span span;
  span.pid = pid_of(scheduler);
  span.name = "step";
  span.category = "scheduler";
  span.start_ns = start_ns;
  span.dur_ns = end_ns > start_ns ? end_ns - start_ns : 0;
  span.step = step_id;
  span.shape = shape;
  span.share_us = share_us;
  spans_.push_back(std::move(span));
}

void TraceSink::set_group(const std::string& scheduler, const std::string& group) {
  std::lock_guard lock(mu_);
  groups_[pid_of(scheduler)] = group;
}

size_t TraceSink::num_spans() const {
  std::lock_guard lock(mu_);
  return spans_.size();
}

Status TraceSink::write() const {
  std::lock_guard lock(mu_);
  // Every span on this machine's clock.
  auto start_of = [&](const Span& s) {
    auto clock = clocks_.find(s.pid);
    return clock == clocks_.end() || clock->second.slack_ns == UINT64_MAX
               ? static_cast<int64_t>(s.start_ns)
               : static_cast<int64_t>(s.start_ns) - clock->second.offset_ns;
  };
  int64_t origin = INT64_MAX;
  for (const Span& s : spans_) origin = std::min(origin, start_of(s));
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [track, pid] : pids_) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", track}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
  }
  for (const Span& s : spans_) {
    nlohmann::json args = {{"step", s.step}};
    if (s.layer >= 0) args["layer"] = s.layer;
    if (s.bytes > 0) args["bytes"] = s.bytes;
    if (s.category == "scheduler") {
      args["seqs"] = s.shape.sequences;
      args["tokens"] = s.shape.tokens();
      args["prefill_tokens"] = s.shape.prefill_tokens;
      args["decode_tokens"] = s.shape.decode_tokens;
      args["attention_pairs"] = s.shape.attention_pairs;
      args["share_us"] = s.share_us;
      if (auto group = groups_.find(s.pid); group != groups_.end()) args["group"] = group->second;
    }
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"ts", double(start_of(s) - origin) / 1000.0},
                      {"dur", double(s.dur_ns) / 1000.0},
                      {"pid", s.pid},
                      {"tid", s.tid},
                      {"args", std::move(args)}});
  }
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  std::ofstream out(path_);
  out << doc.dump() << "\n";
  out.close();
  if (!out) return make_error(Errc::invalid_argument, "--trace: cannot write " + path_.string());
  return {};
}

}  // namespace actord
