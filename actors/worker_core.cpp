#include "actors/worker_core.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comms/capnp_codec.hpp"
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
  WireReader reader(msg);
  auto step = reader.root<wire::ExecuteStep>();
  auto fail = [&](const std::string& why) {
    return build<wire::StepResult>([&](wire::StepResult::Builder out) {
      out.setCorrelationId(step.getCorrelationId());
      out.setStepId(step.getStepId());
      set_error(out.initError(), Error{Errc::worker_failed, name_ + ": " + why});
    });
  };
  if (!model_) return fail("step before the model was loaded");

  const auto seqs = step.getSeqs();
  const int vocab = model_->config().vocab_size;
  const int block_size = kv_->block_size();
  batch_.tokens.clear();
  batch_.seqs.clear();
  tables_.resize(seqs.size());
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    auto s = seqs[i];
    SeqSlice slice;
    slice.first_token = static_cast<int32_t>(batch_.tokens.size());
    slice.num_tokens = static_cast<int32_t>(s.getTokenIds().size());
    slice.start_pos = static_cast<int32_t>(s.getStartPos());
    slice.want_logits = s.getSample();
    for (int32_t id : s.getTokenIds()) {
      if (id < 0 || id >= vocab) return fail("token id " + std::to_string(id) + " is outside the vocabulary");
      batch_.tokens.push_back(id);
    }
    auto& table = tables_[i];
    table = to_vector<uint32_t>(s.getBlockTable());
    const size_t needed = (static_cast<size_t>(slice.start_pos + slice.num_tokens) + block_size - 1) / block_size;
    if (table.size() < needed) return fail("block table too short for sequence " + std::to_string(s.getSeqId()));
    for (uint32_t b : table)
      if (static_cast<int>(b) >= kv_->num_blocks()) return fail("block id " + std::to_string(b) + " out of range");
    batch_.seqs.push_back(slice);
  }
  for (size_t i = 0; i < batch_.seqs.size(); ++i) batch_.seqs[i].block_table = tables_[i].data();

  model_->forward(batch_, *kv_, logits_, *pool_);

  const auto t1 = std::chrono::steady_clock::now();
  return build<wire::StepResult>([&](wire::StepResult::Builder out) {
    out.setCorrelationId(step.getCorrelationId());
    out.setStepId(step.getStepId());
    uint32_t n_sampled = 0;
    for (auto s : seqs) n_sampled += s.getSample() ? 1 : 0;
    auto results = out.initResults(n_sampled);
    uint32_t r = 0;
    for (auto s : seqs) {
      if (!s.getSample()) continue;
      auto sp = s.getSampling();
      SamplingOptions opts{sp.getTemperature(), sp.getTopP(), sp.getTopK(), sp.getSeed()};
      results[r].setSeqId(s.getSeqId());
      results[r].setTokenId(sampler_.sample(logits_.data() + size_t(r) * vocab, vocab, opts, s.getSampleIndex()));
      ++r;
    }
    out.setComputeMicros(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count()));
  });
}

}  // namespace actord
