#include "comms/codecs.hpp"

namespace actord {

void to_wire(const SamplingOptions& in, wire::SamplingParams::Builder out) {
  out.setTemperature(in.temperature);
  out.setTopP(in.top_p);
  out.setTopK(in.top_k);
  out.setSeed(in.seed);
  out.setMinP(in.min_p);
  out.setRepetitionPenalty(in.repetition_penalty);
  out.setFrequencyPenalty(in.frequency_penalty);
  out.setPresencePenalty(in.presence_penalty);
  out.setMinTokens(in.min_tokens);
  out.setLogprobs(in.logprobs);
  out.setN(in.n);
  out.setPromptLogprobs(in.prompt_logprobs);
  out.setResponseFormat(in.response_format == ResponseFormat::json_object   ? wire::ResponseFormat::JSON_OBJECT
                        : in.response_format == ResponseFormat::json_schema ? wire::ResponseFormat::JSON_SCHEMA
                        : in.response_format == ResponseFormat::regex       ? wire::ResponseFormat::REGEX
                        : in.response_format == ResponseFormat::grammar     ? wire::ResponseFormat::GRAMMAR
                                                                             : wire::ResponseFormat::TEXT);
  if (!in.json_schema.empty()) out.setJsonSchema(in.json_schema);
  if (!in.regex.empty()) out.setRegex(in.regex);
  if (!in.grammar.empty()) out.setGrammar(in.grammar);
  if (!in.logit_bias.empty()) {
    auto biases = out.initLogitBias(static_cast<uint32_t>(in.logit_bias.size()));
    for (uint32_t i = 0; i < biases.size(); ++i) {
      biases[i].setId(in.logit_bias[i].id);
      biases[i].setBias(in.logit_bias[i].bias);
    }
  }
}

SamplingOptions from_wire(wire::SamplingParams::Reader in) {
  SamplingOptions o;
  o.temperature = in.getTemperature();
  o.top_p = in.getTopP();
  o.top_k = in.getTopK();
  o.seed = in.getSeed();
  o.min_p = in.getMinP();
  o.repetition_penalty = in.getRepetitionPenalty();
  o.frequency_penalty = in.getFrequencyPenalty();
  o.presence_penalty = in.getPresencePenalty();
  o.min_tokens = in.getMinTokens();
  o.logprobs = in.getLogprobs();
  o.n = in.getN();
  o.prompt_logprobs = in.getPromptLogprobs();
  o.response_format = in.getResponseFormat() == wire::ResponseFormat::JSON_OBJECT   ? ResponseFormat::json_object
                      : in.getResponseFormat() == wire::ResponseFormat::JSON_SCHEMA ? ResponseFormat::json_schema
                      : in.getResponseFormat() == wire::ResponseFormat::REGEX       ? ResponseFormat::regex
                      : in.getResponseFormat() == wire::ResponseFormat::GRAMMAR     ? ResponseFormat::grammar
                                                                                     : ResponseFormat::text;
  o.json_schema = in.getJsonSchema();
  o.regex = in.getRegex();
  o.grammar = in.getGrammar();
  o.logit_bias.reserve(in.getLogitBias().size());
  for (const auto b : in.getLogitBias()) o.logit_bias.push_back({b.getId(), b.getBias()});
  return o;
}

void to_wire(const TokenLogprobs& in, wire::TokenLogprobs::Builder out) {
  out.setLogprob(in.logprob);
  fill_list(out.initTopIds(static_cast<uint32_t>(in.top_ids.size())), in.top_ids);
  fill_list(out.initTopLogprobs(static_cast<uint32_t>(in.top_logprobs.size())), in.top_logprobs);
}

TokenLogprobs from_wire(wire::TokenLogprobs::Reader in) {
  return TokenLogprobs{in.getLogprob(), to_vector<int32_t>(in.getTopIds()), to_vector<float>(in.getTopLogprobs())};
}

void to_wire(const SchedulerStats& in, wire::SchedulerStats::Builder out) {
#define ACTORD_STATS_SET(name, Wire) out.set##Wire(in.name);
  ACTORD_SCHEDULER_STATS_FIELDS(ACTORD_STATS_SET)
#undef ACTORD_STATS_SET
  out.setNumExperts(in.num_experts);
  fill_list(out.initExpertTokens(static_cast<uint32_t>(in.expert_tokens.size())), in.expert_tokens);
  fill_list(out.initExpertPlacement(static_cast<uint32_t>(in.expert_placement.size())), in.expert_placement);
}

SchedulerStats from_wire(wire::SchedulerStats::Reader in) {
  SchedulerStats s;
#define ACTORD_STATS_GET(name, Wire) s.name = in.get##Wire();
  ACTORD_SCHEDULER_STATS_FIELDS(ACTORD_STATS_GET)
#undef ACTORD_STATS_GET
  s.num_experts = in.getNumExperts();
  s.expert_tokens = to_vector<uint64_t>(in.getExpertTokens());
  s.expert_placement = to_vector<int32_t>(in.getExpertPlacement());
  return s;
}

wire_msg stats_request(uint64_t correlation_id) {
  return build<wire::StatsRequest>([&](wire::StatsRequest::Builder out) { out.setCorrelationId(correlation_id); });
}

}  // namespace actord
