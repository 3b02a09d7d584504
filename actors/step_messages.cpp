#include "actors/step_messages.hpp"

#include "comms/capnp_codec.hpp"

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

wire_msg encode_execute_step(const StepPlan& plan, uint64_t step_id) {
  size_t words = 16;  // root and list headers
  for (const PlannedSlice& s : plan.slices) words += 12 + (s.tokens.size() + 1) / 2 + (s.block_table.size() + 1) / 2;
  return build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
    out.setCorrelationId(step_id);
    out.setStepId(step_id);
    auto seqs = out.initSeqs(static_cast<uint32_t>(plan.slices.size()));
    for (uint32_t i = 0; i < plan.slices.size(); ++i) {
      const PlannedSlice& s = plan.slices[i];
      auto b = seqs[i];
      b.setSeqId(s.seq_id);
      auto toks = b.initTokenIds(static_cast<uint32_t>(s.tokens.size()));
      for (uint32_t t = 0; t < s.tokens.size(); ++t) toks.set(t, s.tokens[t]);
      b.setStartPos(static_cast<uint32_t>(s.start_pos));
      auto table = b.initBlockTable(static_cast<uint32_t>(s.block_table.size()));
      for (uint32_t t = 0; t < s.block_table.size(); ++t) table.set(t, s.block_table[t]);
      b.setSample(s.sample);
      auto sp = b.initSampling();
      sp.setTemperature(s.sampling.temperature);
      sp.setTopP(s.sampling.top_p);
      sp.setTopK(s.sampling.top_k);
      sp.setSeed(s.sampling.seed);
      b.setSampleIndex(s.sample_index);
    }
  }, static_cast<unsigned>(words));
}

wire_msg encode_stream_deltas(const std::vector<const SequenceUpdate*>& updates) {
  return build<wire::StreamDeltaBatch>([&](wire::StreamDeltaBatch::Builder out) {
    auto deltas = out.initDeltas(static_cast<uint32_t>(updates.size()));
    for (uint32_t d = 0; d < updates.size(); ++d) {
      const SequenceUpdate& u = *updates[d];
      auto delta = deltas[d];
      delta.setRequestId(u.id);
      fill_list(delta.initTokenIds(static_cast<uint32_t>(u.new_tokens.size())), u.new_tokens);
      delta.setFinishReason(to_wire(u.finish));
      delta.setPromptTokens(u.prompt_tokens);
      if (u.finish == Finish::error) set_error(delta.initError(), Error{u.error_code, u.error});
    }
  });
}

}  // namespace actord
