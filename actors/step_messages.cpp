#include "actors/step_messages.hpp"

#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord {
namespace {

wire::FinishReason to_wire(Finish finish) {
  switch (finish) {
    case Finish::none: return wire::FinishReason::NONE;
    case Finish::stop: return wire::FinishReason::STOP;
    case Finish::length: return wire::FinishReason::LENGTH;
    case Finish::error: return wire::FinishReason::ERROR;
    case Finish::cancelled: return wire::FinishReason::CANCELLED;
  }
  return wire::FinishReason::ERROR;
}

}  // namespace

wire_msg encode_execute_step(const StepPlan& plan, uint64_t step_id, std::span<const int32_t> expert_placement,
                             uint32_t lane_tokens, bool trace, std::span<const uint32_t> lane_micro_tokens,
                             bool whole) {
  // Root and list headers, released ids, lane tokens, block copies, placement.
  size_t words = 24 + (plan.released.size() + 1) + (lane_micro_tokens.size() + 1) / 2 + plan.swap_out.size() +
                 plan.swap_in.size() + plan.copies.size() + (expert_placement.size() + 1) / 2;
  for (const PlannedSlice& s : plan.slices) {
    words += 15 + (s.tokens.size() + 1) / 2 + (s.new_blocks.size() + 1) / 2;
    if (s.new_sequence) words += 10 + (s.request->stop_ids.size() + 1) / 2;
  }
  return build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
    out.setCorrelationId(step_id);
    out.setStepId(step_id);
    out.setLaneTokens(lane_tokens);
    if (!lane_micro_tokens.empty()) {
      auto list = out.initLaneTokensPerMicroBatch(static_cast<uint32_t>(lane_micro_tokens.size()));
      for (uint32_t k = 0; k < lane_micro_tokens.size(); ++k) list.set(k, lane_micro_tokens[k]);
    }
    out.setTrace(trace);
    out.setWholeBatch(whole);
    fill_list(out.initReleased(static_cast<uint32_t>(plan.released.size())), plan.released);
    auto copies = [](auto list, const std::vector<BlockCopy>& from) {
      for (uint32_t i = 0; i < from.size(); ++i) {
        list[i].setSrc(from[i].src);
        list[i].setDst(from[i].dst);
      }
    };
    if (!plan.swap_out.empty()) copies(out.initSwapOut(static_cast<uint32_t>(plan.swap_out.size())), plan.swap_out);
    if (!plan.swap_in.empty()) copies(out.initSwapIn(static_cast<uint32_t>(plan.swap_in.size())), plan.swap_in);
    if (!plan.copies.empty()) copies(out.initCopyBlocks(static_cast<uint32_t>(plan.copies.size())), plan.copies);
    if (!expert_placement.empty()) {
      auto list = out.initExpertPlacement(static_cast<uint32_t>(expert_placement.size()));
      for (uint32_t i = 0; i < expert_placement.size(); ++i) list.set(i, expert_placement[i]);
    }
    auto seqs = out.initSeqs(static_cast<uint32_t>(plan.slices.size()));
    for (uint32_t i = 0; i < plan.slices.size(); ++i) {
      const PlannedSlice& s = plan.slices[i];
      auto b = seqs[i];
      b.setSeqId(s.seq_id);
      if (s.from_previous >= 0) {
        b.setFromPrevious(s.from_previous);
        b.initTokenIds(1).set(0, -1);
      } else {
        auto toks = b.initTokenIds(static_cast<uint32_t>(s.tokens.size()));
        for (uint32_t t = 0; t < s.tokens.size(); ++t) toks.set(t, s.tokens[t]);
      }
      b.setStartPos(static_cast<uint32_t>(s.start_pos));
      auto blocks = s.new_sequence ? b.initBlockTable(static_cast<uint32_t>(s.new_blocks.size()))
                                   : b.initAppendBlocks(static_cast<uint32_t>(s.new_blocks.size()));
      for (uint32_t t = 0; t < s.new_blocks.size(); ++t) blocks.set(t, s.new_blocks[t]);
      b.setSample(s.sample);
      b.setSampleIndex(s.sample_index);
      if (s.prompt_logprobs_from >= 0) {
        b.setPromptLogprobsFrom(s.prompt_logprobs_from);
        b.setNextPromptToken(s.next_prompt_token);
      }
      if (s.forks > 1) b.setForks(s.forks);
      if (s.drafts > 0) b.setDrafts(static_cast<uint32_t>(s.drafts));
      if (s.new_sequence) {
        const SequenceRequest& req = *s.request;
        b.setNewSequence(true);
        to_wire(req.sampling, b.initSampling());
        b.setPromptLen(static_cast<uint32_t>(req.prompt.size()));
        b.setLora(req.lora);
        if ((req.sampling.min_tokens > 0 || req.sampling.structured()) && !req.ignore_eos)
          fill_list(b.initStopIds(static_cast<uint32_t>(req.stop_ids.size())), req.stop_ids);
        if (s.start_pos > 0 && (req.sampling.has_penalties() || req.sampling.structured())) {
          auto context = b.initContextTokens(static_cast<uint32_t>(s.start_pos));
          for (uint32_t t = 0; t < static_cast<uint32_t>(s.start_pos); ++t) context.set(t, s.context[t]);
        }
      }
    }
  }, static_cast<unsigned>(words));
}

bool add_expert_load(const wire_msg& msg, SchedulerStats& stats) {
  WireReader reader(msg);
  auto result = reader.root<wire::StepResult>();
  const uint32_t experts = result.getNumExperts();
  const auto tokens = result.getExpertTokens();
  if (experts == 0 || tokens.size() == 0) return false;
  const size_t first = size_t(result.getExpertLayerFirst()) * experts;
  if (stats.num_experts != experts) stats.expert_tokens.clear();  // (a model of other experts: start over)
  stats.num_experts = experts;
  if (stats.expert_tokens.size() < first + tokens.size()) stats.expert_tokens.resize(first + tokens.size());
  for (uint32_t i = 0; i < tokens.size(); ++i) stats.expert_tokens[first + i] += tokens[i];
  return true;
}

StepResultInfo decode_step_result(const wire_msg& msg, std::vector<StepSample>& samples,
                                  std::vector<StepPromptLogprobs>& prompt) {
  StepResultInfo info;
  samples.clear();
  prompt.clear();
  WireReader reader(msg);
  auto result = reader.root<wire::StepResult>();
  if (has_error(result.getError())) {
    info.error = get_error(result.getError());
    return info;
  }
  info.compute_us = result.getComputeMicros();
  info.idle_us = result.getIdleMicros();
  info.comm_us = result.getCommMicros();
  info.answered_late_us = result.getAnsweredLateMicros();
  samples.reserve(result.getResults().size());
  for (auto r : result.getResults()) {
    StepSample& s = samples.emplace_back();
    s.seq_id = r.getSeqId();
    s.token = r.getTokenId();
    if (r.hasLogprobs()) s.logprobs = from_wire(r.getLogprobs());
  }
  for (auto chunk : result.getPromptLogprobs()) {
    StepPromptLogprobs& p = prompt.emplace_back();
    p.seq_id = chunk.getSeqId();
    p.first_pos = chunk.getFirstPos();
    for (auto e : chunk.getEntries()) p.entries.push_back(from_wire(e));
  }
  return info;
}

wire_msg encode_stream_deltas(const std::vector<const SequenceUpdate*>& updates,
                              const std::unordered_map<uint64_t, uint64_t>& queue_micros) {
  size_t count = 0, words = 4;
  for (const SequenceUpdate* u : updates) {
    count += 1 + u->unforked_samples;
    words += 8 * (1 + u->unforked_samples) + (u->new_tokens.size() + 1) / 2;  // the delta, its token list
    if (!u->logprobs.empty() || !u->prompt_logprobs.empty() || u->finish == Finish::error) words += 256;
  }
  return build<wire::StreamDeltaBatch>([&](wire::StreamDeltaBatch::Builder out) {
    auto deltas = out.initDeltas(static_cast<uint32_t>(count));
    uint32_t d = 0;
    for (const SequenceUpdate* update : updates) {
      const SequenceUpdate& u = *update;
      for (uint32_t sample = 0; sample <= u.unforked_samples; ++sample) {  // samples that never forked end alike
        auto delta = deltas[d++];
        delta.setRequestId(u.id + sample);
        delta.setFinishReason(to_wire(u.finish));
        delta.setPromptTokens(u.prompt_tokens);
        if (u.finish == Finish::error) set_error(delta.initError(), Error{u.error_code, u.error});
        if (sample > 0) continue;
        if (!queue_micros.empty()) {
          if (auto q = queue_micros.find(u.id); q != queue_micros.end()) delta.setQueueMicros(q->second);
        }
        fill_list(delta.initTokenIds(static_cast<uint32_t>(u.new_tokens.size())), u.new_tokens);
        if (!u.logprobs.empty()) {
          auto lps = delta.initLogprobs(static_cast<uint32_t>(u.logprobs.size()));
          for (uint32_t t = 0; t < u.logprobs.size(); ++t) to_wire(u.logprobs[t], lps[t]);
        }
        if (!u.prompt_logprobs.empty()) {
          delta.setPromptLogprobsFrom(u.prompt_logprobs_from);
          auto lps = delta.initPromptLogprobs(static_cast<uint32_t>(u.prompt_logprobs.size()));
          for (uint32_t t = 0; t < u.prompt_logprobs.size(); ++t) to_wire(u.prompt_logprobs[t], lps[t]);
        }
      }
    }
  }, static_cast<unsigned>(words));
}

SequenceRequest decode_submit(const wire_msg& submit) {
  WireReader reader(submit);
  auto in = reader.root<wire::SubmitRequest>();
  SequenceRequest req;
  req.id = in.getRequestId();
  req.prompt = to_vector<int32_t>(in.getPromptIds());
  req.max_tokens = in.getMaxTokens();
  req.sampling = from_wire(in.getSampling());
  req.stop_ids = to_vector<int32_t>(in.getStopIds());
  req.ignore_eos = in.getIgnoreEos();
  req.priority = in.getPriority();
  req.resumed = to_vector<int32_t>(in.getResumeIds());
  req.prompt_logprobs_reported = in.getPromptLogprobsReported();
  req.hand_backs = in.getHandBacks();
  req.resumed_at_hand_back = in.getResumedAtHandBack();
  req.lora = in.getLora();
  return req;
}

wire_msg encode_submit(const SequenceRequest& req, const wire_msg* kv) {
  const size_t words = 64 + (req.prompt.size() + req.resumed.size() + req.stop_ids.size()) / 2;
  wire_msg msg = build<wire::SubmitRequest>([&](wire::SubmitRequest::Builder out) {
    out.setCorrelationId(req.id);
    out.setRequestId(req.id);
    fill_list(out.initPromptIds(static_cast<uint32_t>(req.prompt.size())), req.prompt);
    out.setMaxTokens(req.max_tokens);
    to_wire(req.sampling, out.initSampling());
    fill_list(out.initStopIds(static_cast<uint32_t>(req.stop_ids.size())), req.stop_ids);
    out.setIgnoreEos(req.ignore_eos);
    out.setPriority(req.priority);
    fill_list(out.initResumeIds(static_cast<uint32_t>(req.resumed.size())), req.resumed);
    out.setPromptLogprobsReported(req.prompt_logprobs_reported);
    out.setHandBacks(req.hand_backs);
    out.setResumedAtHandBack(req.resumed_at_hand_back);
    out.setLora(req.lora);
    if (kv) {
      WireReader moved(*kv);
      out.setKv(moved.root<wire::KvExport>());
    }
  }, static_cast<unsigned>(words));
  if (kv) msg.bulk = kv->bulk;
  return msg;
}

}  // namespace actord
