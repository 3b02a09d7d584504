#include "actors/worker_core.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "plugins/plugin_loader.hpp"

namespace actord {

wire_msg WorkerCore::init(const wire_msg& msg) {
  WireReader reader(msg);
  auto req = reader.root<wire::WorkerInit>();
  name_ = req.getName();
  const uint64_t correlation = req.getCorrelationId();
  Error failure;
  bool ok = true;
  auto model_dir = std::filesystem::path(std::string(req.getModelPath()));
  for (auto plugin : req.getPlugins()) {
    if (!ok) break;
    if (auto st = load_plugin(std::string(plugin), registry_); !st) {
      ok = false;
      failure = st.error();
    }
  }
  auto cfg = ModelConfig::load(model_dir);
  if (!ok) {
  } else if (!cfg) {
    ok = false;
    failure = cfg.error();
  } else {
    ModelLoadOptions options;
    options.model_dir = model_dir;
    options.dtype = req.getDtype();
    options.load_format = req.getLoadFormat().size() ? std::string(req.getLoadFormat()) : "auto";
    options.seed = req.getSeed();
    if (options.dtype.empty()) options.dtype = "auto";
    auto model = registry_.create(*cfg, options);
    if (!model) {
      ok = false;
      failure = model.error();
    } else {
      model_ = std::move(*model);
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      pool_ = std::make_unique<cpu::ThreadPool>(req.getThreads() > 0 ? static_cast<int>(req.getThreads())
                                                                     : static_cast<int>(cores));
      kv_ = std::make_unique<KvCache>(cfg->num_layers, cfg->num_kv_heads, cfg->head_dim,
                                      static_cast<int>(req.getNumKvBlocks()), static_cast<int>(req.getBlockSize()),
                                      parse_dtype(std::string_view(req.getKvDtype().cStr())).value_or(DType::f32));
    }
  }
  return build<wire::WorkerReady>([&](wire::WorkerReady::Builder out) {
    out.setCorrelationId(correlation);
    out.setName(name_);
    out.setPid(static_cast<int32_t>(getpid()));
    if (!ok) set_error(out.initError(), failure);
  });
}

wire_msg WorkerCore::execute(const wire_msg& msg) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t idle_us =
      last_step_end_ ? static_cast<uint64_t>(
                           std::chrono::duration_cast<std::chrono::microseconds>(t0 - *last_step_end_).count())
                     : 0;
  WireReader reader(msg);
  auto step = reader.root<wire::ExecuteStep>();
  auto fail = [&](const std::string& why) {
    previous_failed_ = true;
    last_step_end_ = std::chrono::steady_clock::now();
    return build<wire::StepResult>([&](wire::StepResult::Builder out) {
      out.setCorrelationId(step.getCorrelationId());
      out.setStepId(step.getStepId());
      set_error(out.initError(), Error{Errc::worker_failed, name_ + ": " + why});
    });
  };
  if (!model_) return fail("step before the model was loaded");

  for (uint64_t id : step.getReleased()) seqs_.erase(id);
  const auto seqs = step.getSeqs();
  const int vocab = model_->config().vocab_size;
  const int block_size = kv_->block_size();
  batch_.tokens.clear();
  batch_.seqs.clear();
  states_.resize(seqs.size());
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    auto s = seqs[i];
    const uint64_t seq_id = s.getSeqId();
    if (s.getNewSequence()) {
      SequenceState fresh;
      fresh.sampling = from_wire(s.getSampling());
      fresh.prompt_len = s.getPromptLen();
      fresh.masked_until_min_tokens = to_vector<int32_t>(s.getStopIds());
      if (fresh.sampling.has_penalties()) {  // the tokens of a cached prefix, which this worker is not fed
        uint32_t pos = 0;
        for (int32_t id : s.getContextTokens()) fresh.remember(pos++, id);
      }
      seqs_[seq_id] = std::move(fresh);
    }
    auto state = seqs_.find(seq_id);
    if (state == seqs_.end()) return fail("sequence " + std::to_string(seq_id) + " has no state (no first slice)");
    states_[i] = &state->second;
    SeqSlice slice;
    slice.first_token = static_cast<int32_t>(batch_.tokens.size());
    slice.num_tokens = static_cast<int32_t>(s.getTokenIds().size());
    slice.start_pos = static_cast<int32_t>(s.getStartPos());
    slice.want_logits = s.getSample();
    if (s.getFromPrevious() >= 0) {
      const auto index = static_cast<size_t>(s.getFromPrevious());
      if (previous_failed_ || index >= previous_samples_.size() || slice.num_tokens != 1)
        return fail("sequence " + std::to_string(seq_id) + " asks for a token the previous step did not sample");
      batch_.tokens.push_back(previous_samples_[index]);
    } else {
      for (int32_t id : s.getTokenIds()) {
        if (id < 0 || id >= vocab) return fail("token id " + std::to_string(id) + " is outside the vocabulary");
        batch_.tokens.push_back(id);
      }
    }
    SequenceState& st = state->second;
    if (st.sampling.has_penalties()) {
      for (int32_t t = 0; t < slice.num_tokens; ++t)
        st.remember(static_cast<uint32_t>(slice.start_pos + t), batch_.tokens[static_cast<size_t>(slice.first_token + t)]);
    }
    auto& table = st.blocks;
    for (uint32_t b : s.getNewSequence() ? s.getBlockTable() : s.getAppendBlocks()) {
      if (static_cast<int>(b) >= kv_->num_blocks()) return fail("block id " + std::to_string(b) + " out of range");
      table.push_back(b);
    }
    const size_t needed = (static_cast<size_t>(slice.start_pos + slice.num_tokens) + block_size - 1) / block_size;
    if (table.size() < needed) return fail("block table too short for sequence " + std::to_string(seq_id));
    batch_.seqs.push_back(slice);
  }
  // Pointers into the tables are taken once every table of the step is final.
  for (size_t i = 0; i < batch_.seqs.size(); ++i) batch_.seqs[i].block_table = states_[i]->blocks.data();

  model_->forward(batch_, *kv_, logits_, *pool_);

  sample_requests_.clear();
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].getSample()) continue;
    const SequenceState& st = *states_[i];
    SampleRequest r;
    r.options = &st.sampling;
    r.sample_index = seqs[i].getSampleIndex();
    if (st.sampling.has_penalties()) r.history = &st.history;
    if (r.sample_index < st.sampling.min_tokens) r.masked_ids = st.masked_until_min_tokens;
    sample_requests_.push_back(r);
  }
  samples_.resize(sample_requests_.size());
  sampler_.sample_rows(logits_.data(), vocab, sample_requests_, samples_, *pool_);
  previous_samples_.clear();
  for (const SampledToken& t : samples_) previous_samples_.push_back(t.token);
  previous_failed_ = false;

  const auto t1 = std::chrono::steady_clock::now();
  last_step_end_ = t1;
  return build<wire::StepResult>([&](wire::StepResult::Builder out) {
    out.setCorrelationId(step.getCorrelationId());
    out.setStepId(step.getStepId());
    auto results = out.initResults(static_cast<uint32_t>(samples_.size()));
    for (uint32_t r = 0; r < samples_.size(); ++r) {
      results[r].setTokenId(samples_[r].token);
      if (sample_requests_[r].options->logprobs >= 0) {
        auto lp = results[r].initLogprobs();
        lp.setLogprob(samples_[r].logprob);
        const auto& top = samples_[r].top;
        auto ids = lp.initTopIds(static_cast<uint32_t>(top.size()));
        auto values = lp.initTopLogprobs(static_cast<uint32_t>(top.size()));
        for (uint32_t k = 0; k < top.size(); ++k) {
          ids.set(k, top[k].first);
          values.set(k, top[k].second);
        }
      }
    }
    uint32_t r = 0;
    for (auto s : seqs)
      if (s.getSample()) results[r++].setSeqId(s.getSeqId());
    out.setComputeMicros(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count()));
    out.setIdleMicros(idle_us);
  });
}

}  // namespace actord
