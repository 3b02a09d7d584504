#include "api/metrics.hpp"

#include <algorithm>
#include <sstream>

namespace actord {
namespace {

std::vector<double> latency_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

}  // namespace

void ApiMetrics::Histogram::observe(double v) {
  if (counts.empty()) counts.assign(bounds.size() + 1, 0);
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
  ++counts[bucket];
  sum += v;
  ++count;
}

ApiMetrics::ApiMetrics(std::string model_name) : model_(std::move(model_name)) {
  for (Histogram* h : {&ttft_, &itl_, &tpot_, &e2e_, &queue_}) {
    h->bounds = latency_bounds();
    h->counts.assign(h->bounds.size() + 1, 0);
  }
}

void ApiMetrics::count_request(const std::string& outcome) {
  std::lock_guard lock(mutex_);
  ++requests_[outcome];
}

void ApiMetrics::count_lora_request(const std::string& adapter) {
  std::lock_guard lock(mutex_);
  ++lora_requests_[adapter];
}

void ApiMetrics::count_tokens(uint64_t prompt, uint64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  generation_tokens_ += generated;
}

void ApiMetrics::observe_ttft(double s) { std::lock_guard lock(mutex_); ttft_.observe(s); }
void ApiMetrics::observe_itl(double s) { std::lock_guard lock(mutex_); itl_.observe(s); }
void ApiMetrics::observe_tpot(double s) { std::lock_guard lock(mutex_); tpot_.observe(s); }
void ApiMetrics::observe_e2e(double s) { std::lock_guard lock(mutex_); e2e_.observe(s); }
void ApiMetrics::observe_queue_time(double s) { std::lock_guard lock(mutex_); queue_.observe(s); }

std::string ApiMetrics::text(const SchedulerStats* stats, size_t requests_in_flight) const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  const std::string label = "model_name=\"" + model_ + "\",replica=\"0\"";
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << "{" << label << "} " << value << "\n";
  };
  out << "# HELP actord_request_success_total Finished requests by outcome.\n"
         "# TYPE actord_request_success_total counter\n";
  for (const char* outcome : {"success", "refused", "error"}) {
    auto it = requests_.find(outcome);
    out << "actord_request_success_total{" << label << ",outcome=\"" << outcome << "\"} "
        << (it == requests_.end() ? 0 : it->second) << "\n";
  }
  if (!lora_requests_.empty()) {
    out << "# HELP actord_lora_requests_total Requests naming a LoRA adapter as their model, by adapter.\n"
           "# TYPE actord_lora_requests_total counter\n";
    for (const auto& [adapter, count] : lora_requests_)
      out << "actord_lora_requests_total{" << label << ",lora_name=\"" << adapter << "\"} " << count << "\n";
  }
  metric("actord_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", double(prompt_tokens_));
  metric("actord_generation_tokens_total", "counter", "Generated tokens of finished requests.",
         double(generation_tokens_));
  metric("actord_num_requests_running", "gauge", "Requests submitted and not finished.", double(requests_in_flight));
  if (stats) {
    metric("actord_num_preemptions_total", "counter", "Sequences preempted (recompute or swap).", double(stats->preemptions));
    metric("actord_spec_decode_num_draft_tokens_total", "counter", "Speculative decoding: draft tokens verified.",
           double(stats->draft_tokens));
    metric("actord_spec_decode_num_accepted_tokens_total", "counter",
           "Speculative decoding: draft tokens the samples confirmed.", double(stats->accepted_draft_tokens));
    metric("actord_swapped_kv_blocks", "gauge", "KV blocks in host swap space.", double(stats->swapped_blocks));
    metric("actord_num_seqs_running", "gauge", "Sequences admitted to the running batch.", double(stats->running_seqs));
    metric("actord_num_seqs_waiting", "gauge", "Sequences waiting for admission (swapped ones included).",
           double(stats->waiting_seqs));
    metric("actord_num_seqs_swapped", "gauge", "Waiting sequences whose KV is in host swap space.",
           double(stats->swapped_seqs));
    metric("actord_prefill_backlog_tokens", "gauge",
           "Tokens of live sequences still to prefill (prompts, recomputed sequences).", double(stats->prefill_backlog));
    metric("actord_kv_lease_blocks", "gauge", "KV blocks leased by the scheduler.", double(stats->lease_blocks));
    metric("actord_prefix_cache_queries_total", "counter", "Prompt blocks looked up in the prefix cache.",
           double(stats->prefix_query_blocks));
    metric("actord_prefix_cache_hits_total", "counter", "Prompt blocks found in the prefix cache.",
           double(stats->prefix_hit_blocks));
    metric("actord_prefix_cache_blocks", "gauge", "Blocks in the prefix cache.", double(stats->prefix_cached_blocks));
    metric("actord_scheduler_steps_total", "counter", "Steps executed.", double(stats->steps));
    metric("actord_prefill_handoffs_total", "counter",
           "Prefill/decode disaggregation: prefilled sequences handed on to a decode replica.",
           double(stats->prefill_handoffs));
    metric("actord_rebalanced_seqs_total", "counter",
           "Waiting sequences a replica handed back when its group grew, for the router to spread over the group.",
           double(stats->rebalanced_seqs));
    metric("actord_kv_transfers_total", "counter",
           "Sequences whose KV moved to another replica (prefill hand-offs, reshapes).", double(stats->kv_moves_out));
    if (stats->num_experts > 0) {  // MoE layers: a window's load is the difference of two scrapes (rate())
      out << "# HELP actord_expert_tokens_total Tokens routed to each expert of each MoE layer.\n"
             "# TYPE actord_expert_tokens_total counter\n";
      const size_t experts = stats->num_experts;
      for (size_t layer = 0; layer * experts < stats->expert_tokens.size(); ++layer) {
        const auto first = stats->expert_tokens.begin() + ptrdiff_t(layer * experts);
        if (std::all_of(first, first + ptrdiff_t(experts), [](uint64_t n) { return n == 0; })) continue;  // dense
        for (size_t e = 0; e < experts; ++e) {
          out << "actord_expert_tokens_total{" << label << ",layer=\"" << layer << "\",expert=\"" << e << "\"} "
              << first[ptrdiff_t(e)] << "\n";
        }
      }
    }
  }
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cumulative = 0;
    for (size_t b = 0; b < h.bounds.size(); ++b) {
      cumulative += h.counts[b];
      out << name << "_bucket{" << label << ",le=\"" << h.bounds[b] << "\"} " << cumulative << "\n";
    }
    cumulative += h.counts.back();
    out << name << "_bucket{" << label << ",le=\"+Inf\"} " << cumulative << "\n"
        << name << "_sum{" << label << "} " << h.sum << "\n"
        << name << "_count{" << label << "} " << h.count << "\n";
  };
  histogram("actord_time_to_first_token_seconds", "Time to first token.", ttft_);
  histogram("actord_inter_token_latency_seconds", "Time between two tokens of a sequence.", itl_);
  histogram("actord_time_per_output_token_seconds", "Mean time per output token of a finished sequence.", tpot_);
  histogram("actord_e2e_request_latency_seconds", "Request latency, submission to last token.", e2e_);
  histogram("actord_request_queue_time_seconds", "Time a request waited, arrival at the scheduler to its first step.",
            queue_);
  return out.str();
}

}  // namespace actord
