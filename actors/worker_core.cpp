#include "actors/worker_core.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "actors/group_codec.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/collectives/group_factory.hpp"
#include "core/elapsed.hpp"
#include "core/micro_batch_split.hpp"
#include "core/topology_config.hpp"
#include "comms/codecs.hpp"
#include "comms/nccl/nccl_communicator.hpp"
#include "executors/cpu/cpu_backend.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cuda/cuda_backend.hpp"
#include "plugins/plugin_loader.hpp"

namespace actord {

namespace {

// The executor backend a WorkerInit's device names: "cpu" (or empty) on the worker's pool with the kernels of `isa`,
// "cuda:N" on GPU N modulo the GPUs this machine has.
Result<std::unique_ptr<exec::Backend>> make_backend(const std::string& device, cpu::ThreadPool& pool, cpu::Isa isa) {
  if (device.empty() || device == "cpu") return std::unique_ptr<exec::Backend>(new cpu::CpuBackend(pool, isa));
  if (device.rfind("cuda:", 0) == 0) {
    const int gpus = cuda::device_count();
    if (gpus == 0) return make_error(Errc::unsupported, "device: cuda: " + cuda::unavailable_reason());
    int index = 0;
    const auto [end, err] = std::from_chars(device.data() + 5, device.data() + device.size(), index);
    if (err != std::errc{} || end != device.data() + device.size() || index < 0) {
      return make_error(Errc::invalid_argument, "device: '" + device + "' is not cuda:N");
    }
    return cuda::make_backend(index % gpus, &pool);
  }
  return make_error(Errc::invalid_argument, "device: unknown device '" + device + "' (known: cpu, cuda:N)");
}


// The rank's communicator of one group: the one the coordinator handed over, else joined from the spec WorkerInit
// carries. `what`: "TP" or "pipeline"; size: the group's size in the rank's place.
Status link(std::unique_ptr<coll::Communicator>& comm, wire::CollectiveGroup::Reader group, int size, int rank,
            const std::string& who, const char* what) {
  if (size == 1 || comm) return {};
  auto spec = from_wire(group);
  if (!spec) return spec.error();
  if (spec->size != size) {
    return make_error(Errc::invalid_argument, who + ": a rank of a " + what + " group of " + std::to_string(size) +
                                                  " without that group (WorkerInit names one of " +
                                                  std::to_string(spec->size) + ")");
  }
  auto joined = coll::join_group(*spec, rank);
  if (!joined) return Error{joined.error().code, who + ": " + joined.error().message};
  comm = std::move(*joined);
  return {};
}

}  // namespace

wire_msg WorkerCore::init(const wire_msg& msg) {
  const char* report = std::getenv("ACTORD_CUDA_REPORT");
  ahead_counts_.on = report && *report && std::strcmp(report, "0") != 0;
  WireReader reader(msg);
  auto req = reader.root<wire::WorkerInit>();
  name_ = req.getName();
  const uint64_t correlation = req.getCorrelationId();
  Error failure;
  bool ok = true;
  auto model_dir = std::filesystem::path(std::string(req.getModelPath()));
  model_dir_ = model_dir;
  for (auto plugin : req.getPlugins()) {
    if (!ok) break;
    if (auto st = load_plugin(std::string(plugin), registry_); !st) {
      ok = false;
      failure = st.error();
    }
  }
  place_ = RankPlace{static_cast<int>(std::max(1u, req.getTp())), static_cast<int>(std::max(1u, req.getPp())),
                     static_cast<int>(req.getTpRank()), static_cast<int>(req.getPpRank()),
                     static_cast<int>(std::max(1u, req.getEp())), static_cast<int>(req.getNumRedundantExperts())};
  place_.lane = static_cast<int>(req.getLane());
  place_.afd_attention = static_cast<int>(req.getAfdAttention());
  place_.afd_ffn = static_cast<int>(req.getAfdFfn());
  place_.ffn_rank = req.getFfnRank();
  if (ok) {
    Status linked = link(links_.tp, req.getTpGroup(), place_.tp, place_.tp_rank, name_, "TP");
    if (linked) linked = link(links_.pipeline, req.getPipelineGroup(), place_.pp, place_.pp_rank, name_, "pipeline");
    if (linked && place_.ep_group())
      linked = link(links_.ep, req.getEpGroup(), place_.ep_group_size(), place_.ep_rank(), name_, "EP");
    tbo_ = req.getTbo();
    micro_batches_ = std::clamp(static_cast<int>(req.getMicroBatches()), 2, GroupSection::kMaxMicroBatches);
    if (tbo_) {
      // Threads get their groups from the coordinator; a process joins those WorkerInit names.
      const auto specs = req.getMicroBatchGroups();
      if (links_.micro.empty()) links_.micro.resize(size_t(micro_batches_ - 1));
      if (links_.micro.size() != size_t(micro_batches_ - 1) || (specs.size() > 0 && specs.size() != links_.micro.size())) {
        linked = make_error(Errc::invalid_argument, name_ + ": " + std::to_string(micro_batches_) +
                                                        " micro-batches without the groups of each");
      }
      for (size_t k = 0; linked && k < links_.micro.size(); ++k) {
        RankLinks::MicroBatch& mb = links_.micro[k];
        const std::string which = " (micro-batch " + std::to_string(k + 1) + ")";
        const bool given = k < specs.size();
        if (given) linked = link(mb.tp, specs[k].getTp(), place_.tp, place_.tp_rank, name_, ("TP" + which).c_str());
        if (linked && given)
          linked = link(mb.pipeline, specs[k].getPipeline(), place_.pp, place_.pp_rank, name_, ("pipeline" + which).c_str());
        if (linked && given && place_.ep_group())
          linked = link(mb.ep, specs[k].getEp(), place_.ep_group_size(), place_.ep_rank(), name_, ("EP" + which).c_str());
      }
    }
    if (!linked) {
      ok = false;
      failure = linked.error();
    }
  }
  auto cfg = ModelConfig::load(model_dir);
  const auto isa = cpu::isa_for(req.getCpuIsa().size() ? std::string_view(req.getCpuIsa().cStr()) : "auto");
  const auto quant_kind = parse_quant_kind(req.getQuantization().size() ? req.getQuantization().cStr() : "none");
  const auto quant = quant_kind ? make_quant_spec(*quant_kind, static_cast<int>(req.getQuantizationGroup()),
                                                  req.getQuantizationZeroPoints())
                                : Result<QuantSpec>(quant_kind.error());
  if (!ok) {
  } else if (!cfg) {
    ok = false;
    failure = cfg.error();
  } else if (!isa) {
    ok = false;
    failure = Error{isa.error().code, name_ + ": groups[].cpu_isa: " + isa.error().message};
  } else if (!quant) {
    ok = false;
    failure = Error{quant.error().code, name_ + ": model.quantization: " + quant.error().message};
  } else {
    ModelLoadOptions options;
    options.model_dir = model_dir;
    options.dtype = req.getDtype();
    options.load_format = req.getLoadFormat().size() ? std::string(req.getLoadFormat()) : "auto";
    options.seed = req.getSeed();
    options.quantization = *quant;
    options.place = place_;
    options.max_model_len = static_cast<int>(std::min<uint32_t>(req.getMaxModelLen(), INT32_MAX));
    for (auto module : req.getLoraModules()) {
      auto adapter = LoraAdapter::open({module.getName(), std::string(module.getPath())}, *cfg,
                                       static_cast<int>(req.getMaxLoraRank()));
      if (!adapter) {
        ok = false;
        failure = Error{adapter.error().code, name_ + ": " + adapter.error().message};
        break;
      }
      options.lora.push_back(std::move(*adapter));
    }
    model_.reset();  // a model loaded before goes with the backend that holds it
    backend_.reset();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    pool_ = std::make_unique<cpu::ThreadPool>(req.getThreads() > 0 ? static_cast<int>(req.getThreads())
                                                                   : static_cast<int>(cores));
    auto backend = make_backend(std::string(req.getDevice().cStr()), *pool_, *isa);
    if (backend) {
      backend_ = std::move(*backend);
      options.backend = backend_.get();
      // CUDA ranks: the groups joined above only bootstrap the NCCL communicators their device memory goes through.
      for (auto [comm, what] : {std::pair{&links_.tp, "TP"}, {&links_.pipeline, "pipeline"}, {&links_.ep, "EP"}}) {
        if (!ok || !*comm || !(*comm)->spec().over_nccl) continue;
        auto nccl = coll::join_nccl_group(std::move(*comm), cuda::device_of(*backend_), cuda::stream_of(*backend_));
        if (!nccl) {
          ok = false;
          failure = Error{nccl.error().code, name_ + ": " + what + " group: " + nccl.error().message};
        } else {
          *comm = std::move(*nccl);
        }
      }
      // Collectives run between a step's primitives, outside what a CUDA graph of the step would order.
      if (links_.tp || links_.pipeline || links_.ep) cuda::without_step_graphs(*backend_, "the rank is in a group");
    } else {
      ok = false;
      failure = Error{backend.error().code, name_ + ": " + backend.error().message};
    }
    if (options.dtype.empty()) options.dtype = "auto";
    // An allocation that fails despite the engine's check of the machine's memory is reported as out of memory
    // under the key that asked for it.
    auto out_of_memory = [&](const std::string& key, const std::string& what) {
      ok = false;
      failure = Error{Errc::out_of_memory, name_ + ": " + key + ": out of memory while allocating " + what};
    };
    Result<std::unique_ptr<Model>> model = Error{};
    try {
      if (ok) model = registry_.create(*cfg, options);
    } catch (const std::bad_alloc&) {
      out_of_memory("model.path", "the weights of " + model_dir.string());
    }
    if (!ok) {
    } else if (!model) {
      ok = false;
      failure = model.error();
    } else if ((*model)->num_lora_adapters() != static_cast<int>(options.lora.size())) {
      ok = false;
      failure = Error{Errc::unsupported, name_ + ": lora.modules: the " + cfg->architecture +
                                             " model does not take LoRA adapters"};
    } else {
      model_ = std::move(*model);
      const auto kv_dtype = parse_kv_dtype(std::string_view(req.getKvDtype().cStr())).value_or(DType::f32);
      // The KV cache in the backend's memory (a GPU's), or the host's, backed now (KvCache::populate: no page faults
      // in the steps that write it); the swap space always on the host, backed as it is used.
      if (!backend_->stores_kv(kv_dtype)) {
        ok = false;
        failure = Error{Errc::unsupported, name_ + ": engine.kv_cache_dtype: the " + backend_->describe() +
                                               " backend does not store a KV cache of " + dtype_config_name(kv_dtype)};
      }
      enum class CacheRole { pool, swap };
      auto make_cache = [&](uint32_t blocks, const char* key, CacheRole role) -> std::unique_ptr<KvCache> {
        try {
          const KvShape shape = model_->kv_shape();
          const int block_size = static_cast<int>(req.getBlockSize());
          if (role == CacheRole::pool) {
            const size_t bytes = KvCache::bytes_for(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                                                    static_cast<int>(blocks), block_size, kv_dtype);
            auto device = backend_->allocate_device_bytes(bytes);
            if (!device) {
              ok = false;
              failure = Error{device.error().code, name_ + ": " + key + ": " + device.error().message};
              return nullptr;
            }
            if (*device) {
              exec::Backend* be = backend_.get();
              KvStorage storage{(*device)->data, (*device)->owner,
                                [be](void* dst, const void* src, size_t n) { be->copy_bytes(dst, src, n); }};
              return std::make_unique<KvCache>(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                                               static_cast<int>(blocks), block_size, kv_dtype, std::move(storage));
            }
          }
          auto cache = std::make_unique<KvCache>(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                                                 static_cast<int>(blocks), block_size, kv_dtype);
          if (role == CacheRole::swap) return cache;  // backed as it is used
          cache->populate();
          return cache;
        } catch (const std::bad_alloc&) {
          out_of_memory(key, std::to_string(blocks) + " KV blocks of " + std::to_string(req.getBlockSize()) +
                                 " tokens");
          return nullptr;
        }
      };
      twins_.clear();
      if (tbo_) {
        for (int k = 1; k < micro_batches_; ++k)
          if (auto twin = model_->twin()) twins_.push_back(std::move(twin));
        if (twins_.size() != size_t(micro_batches_ - 1)) {
          spdlog::warn("{}: the model has no twin for two-batch overlap: steps run as one batch", name_);
          twins_.clear();
        } else if (!overlap_ || overlap_->micro_batches() != micro_batches_) {
          overlap_ = std::make_unique<OverlapRunner>(micro_batches_);
        }
        micro_.resize(size_t(micro_batches_));
        micro_logits_.resize(size_t(micro_batches_));
        micro_bests_.resize(size_t(micro_batches_));
        micro_traces_.resize(size_t(micro_batches_ - 1));
        micro_comm_ns_.assign(size_t(micro_batches_ - 1), 0);
      }
      if (ok) kv_ = make_cache(req.getNumKvBlocks(), "engine.kv_cache_memory", CacheRole::pool);
      if (kv_ && req.getNumSwapBlocks() > 0)
        swap_ = make_cache(req.getNumSwapBlocks(), "engine.swap_space", CacheRole::swap);
      if (!ok) model_.reset();
    }
  }
  return build<wire::WorkerReady>([&](wire::WorkerReady::Builder out) {
    out.setCorrelationId(correlation);
    out.setName(name_);
    out.setPid(static_cast<int32_t>(getpid()));
    if (!ok) set_error(out.initError(), failure);
  });
}

namespace {

// The step's copy-on-write copies, swap-outs and swap-ins, in that order; an error message for a bad block id.
std::string copy_blocks(wire::ExecuteStep::Reader step, KvCache& kv, KvCache* swap) {
  const auto swap_out = step.getSwapOut();
  const auto swap_in = step.getSwapIn();
  const auto copies = step.getCopyBlocks();
  if ((swap_out.size() > 0 || swap_in.size() > 0) && !swap) return "a swap without host swap space";
  auto in_range = [](const KvCache& kv, uint32_t b) { return b < static_cast<uint32_t>(kv.num_blocks()); };
  for (auto c : copies) {
    if (!in_range(kv, c.getSrc()) || !in_range(kv, c.getDst())) return "block copy out of range";
    kv.copy_block(c.getSrc(), kv, c.getDst());
  }
  for (auto c : swap_out) {
    if (!in_range(kv, c.getSrc()) || !in_range(*swap, c.getDst())) return "swap-out block out of range";
    kv.copy_block(c.getSrc(), *swap, c.getDst());
  }
  for (auto c : swap_in) {
    if (!in_range(*swap, c.getSrc()) || !in_range(kv, c.getDst())) return "swap-in block out of range";
    swap->copy_block(c.getSrc(), kv, c.getDst());
  }
  return {};
}

// Whether every row a step samples is the argmax of its logits (sampler.hpp's takes_raw_argmax; no forks, no prompt
// logprobs): then the last stage's ranks give each row's best instead of logits (ForwardContext::row_bests).
// The same answer on every rank: it reads the step and the sequences' options only.
template <class Seqs, class States>
bool argmax_rows_only(const Seqs& seqs, const States& states) {
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    const auto s = seqs[i];
    if (s.getPromptLogprobsFrom() >= 0) return false;
    if (!s.getSample()) continue;
    const auto& st = *states[i];
    const bool masked = s.getSampleIndex() < st.sampling.min_tokens && !st.stop_ids.empty();
    // (A slice's draft rows have the higher sample indices: none is masked when its first row is not.)
    if (s.getForks() > 1 || !takes_raw_argmax(st.sampling, masked)) return false;
  }
  return true;
}

}  // namespace

template <class Seqs>
size_t WorkerCore::build_sample_requests(const Seqs& seqs) {
  sample_requests_.clear();
  sample_seq_ids_.clear();
  sample_states_.clear();
  sample_rows_.clear();
  fork_options_.clear();
  size_t forked_rows = 0;
  for (uint32_t i = 0; i < seqs.size(); ++i) forked_rows += sample_count(seqs[i]);
  fork_options_.reserve(forked_rows);  // stable addresses for the requests below
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].getSample()) continue;
    SequenceState& st = *states_[i];
    SampleRequest r;  // a response format's allowed ids are set in launch(), once the step's tokens are fed
    r.options = &st.sampling;
    r.sample_index = seqs[i].getSampleIndex();
    if (st.sampling.has_penalties()) r.history = &st.history;
    if (r.sample_index < st.sampling.min_tokens) r.masked_ids = st.stop_ids;
    const uint32_t forks = std::max<uint32_t>(seqs[i].getForks(), 1);
    for (uint32_t f = 0; f < forks; ++f) {
      if (forks > 1) r.options = &fork_options_.emplace_back(st.sampling.for_sample(f));
      sample_requests_.push_back(r);
      sample_seq_ids_.push_back(seqs[i].getSeqId() + f);
      sample_states_.push_back(&st);
      sample_rows_.emplace_back(i, 0);
    }
    // Draft rows (speculative decoding): each sampled as the token after the one before it would be.
    for (uint32_t j = 1; j <= seqs[i].getDrafts(); ++j) {
      r.sample_index = seqs[i].getSampleIndex() + j;
      r.masked_ids = {};
      if (r.sample_index < st.sampling.min_tokens) r.masked_ids = st.stop_ids;
      sample_requests_.push_back(r);
      sample_seq_ids_.push_back(seqs[i].getSeqId());
      sample_states_.push_back(&st);
      sample_rows_.emplace_back(i, j);
    }
  }
  return forked_rows;
}

std::string WorkerCore::pick_greedy() {
  const size_t rows = row_bests_.size();
  greedy_tokens_.resize(rows);
  if (place_.tp > 1) {
    all_bests_.resize(rows * size_t(place_.tp));
    const auto mine = std::as_bytes(std::span<const RowBest>(row_bests_));
    std::vector<size_t> counts(size_t(place_.tp), mine.size());
    const Status shared =
        links_.tp->all_gather_bytes(mine, std::as_writable_bytes(std::span<RowBest>(all_bests_)), counts);
    if (!shared) return shared.error().message;
  }
  merge_row_bests(place_.tp > 1 ? all_bests_ : row_bests_, place_.tp, static_cast<int>(rows), greedy_tokens_);
  return {};
}

template <class Step, class Seqs>
WorkerCore::RunAhead WorkerCore::may_run_ahead(const Step& step, const Seqs& seqs, bool argmax_only,
                                               size_t sampled_rows) {
  if (!backend_->runs_ahead() || place_.sharded() || place_.ep_group() || place_.ep > 1 || !twins_.empty())
    return RunAhead::no;
  if (step.getTrace() || step.hasExpertPlacement() || model_->config().num_experts > 0) return RunAhead::no;
  if (argmax_only) return RunAhead::picks;
  // Draws: whole rows, one token each, without a penalty history (it would miss the pending step's tokens).
  if (sampled_rows != sample_requests_.size()) return RunAhead::no;
  for (uint32_t i = 0; i < seqs.size(); ++i)
    if (seqs[i].getPromptLogprobsFrom() >= 0) return RunAhead::no;
  for (const SampleRequest& r : sample_requests_)
    if (r.history || r.options->structured()) return RunAhead::no;
  return backend_->samples_ahead(sample_requests_, model_->config().vocab_size) ? RunAhead::draws : RunAhead::no;
}

std::optional<wire_msg> WorkerCore::launch(const wire_msg& msg, std::vector<wire_msg>& done) {
  const auto t0 = std::chrono::steady_clock::now();
  // Idle since the last step ended; none while a pending step's device work goes on.
  std::optional<std::chrono::steady_clock::time_point> free_at = last_step_end_;
  if (pending_) free_at = pending_done() ? pending_->done_at : t0;
  const uint64_t idle_us = free_at ? micros_between(*free_at, t0) : 0;
  WireReader reader(msg);
  auto step = reader.root<wire::ExecuteStep>();
  uint64_t ticket = 0;  // Backend::defer_reads of a step that runs ahead
  auto fail = [&](const std::string& why) {
    if (ticket) backend_->complete_reads(std::exchange(ticket, 0));
    if (pending_) done.push_back(finish_pending());  // results in step order
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
  if (auto bad = copy_blocks(step, *kv_, swap_.get()); !bad.empty()) return fail(bad);
  // A rank that fails in one of its groups breaks the others too, so that no peer waits for it until a timeout
  // (a stage whose TP peer died would otherwise leave the next stage waiting for its hidden states).
  auto break_links = [&](const std::string& why) {
    links_.for_each([&](coll::Communicator& comm, int) { comm.abort(name_ + ": " + why); });
    return fail(why);
  };
  // --trace: this step's spans (its idle time before it, the model's phases, every collective, sampling).
  StepTrace* const trace = step.getTrace() ? &trace_ : nullptr;
  if (trace) {
    trace_.clear();
    if (last_step_end_) trace_.add("idle", "idle", StepTrace::ns_of(*last_step_end_), StepTrace::ns_of(t0));
  }
  for (StepTrace& t : micro_traces_) t.clear();
  links_.for_each([&](coll::Communicator& comm, int m) {  // micro-batch m > 0 records into micro_traces_[m - 1]
    comm.set_trace(!trace ? nullptr : m == 0 ? trace : size_t(m) <= micro_traces_.size() ? &micro_traces_[m - 1] : nullptr);
  });
  ForwardContext context(*backend_);
  context.tp = links_.tp.get();
  context.pipeline = links_.pipeline.get();
  context.ep = links_.ep.get();
  context.lane_tokens = static_cast<int>(step.getLaneTokens());
  context.trace = trace;
  uint64_t comm_ns = 0;
  context.comm_ns = &comm_ns;
  if (step.hasExpertPlacement()) {  // EPLB: every rank of the replica switches at this step
    const std::vector<int32_t> placement = to_vector<int32_t>(step.getExpertPlacement());
    const auto start = std::chrono::steady_clock::now();
    if (auto moved = model_->set_expert_placement(placement, context); !moved) return break_links(moved.error().message);
    for (auto& twin : twins_) twin = model_->twin();  // with the new placement
    spdlog::info("{}: expert placement of step {} taken in {:.1f} ms", name_, step.getStepId(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const auto seqs = step.getSeqs();
  const int vocab = model_->config().vocab_size;
  const int block_size = kv_->block_size();
  batch_.tokens.clear();
  batch_.seqs.clear();
  size_t sampled_rows = 0;  // slices that sample (a forking slice counts once: its row)
  prompt_slices_.clear();
  previous_slots_.clear();
  states_.resize(seqs.size());
  for (uint32_t i = 0; i < seqs.size(); ++i) {
    auto s = seqs[i];
    const uint64_t seq_id = s.getSeqId();
    if (s.getNewSequence()) {
      SequenceState fresh;
      fresh.sampling = from_wire(s.getSampling());
      if (auto valid = fresh.sampling.validate(vocab); !valid)
        return fail("sequence " + std::to_string(seq_id) + ": " + valid.error().message);
      fresh.prompt_len = s.getPromptLen();
      if (s.getLora() > static_cast<uint32_t>(model_->num_lora_adapters()))
        return fail("sequence " + std::to_string(seq_id) + ": LoRA adapter " + std::to_string(s.getLora()) +
                    " of the " + std::to_string(model_->num_lora_adapters()) + " this worker serves");
      fresh.lora = static_cast<int32_t>(s.getLora());
      fresh.stop_ids = to_vector<int32_t>(s.getStopIds());
      if (fresh.sampling.structured() && driver()) {
        if (auto failed = start_grammar(fresh); !failed.empty())
          return fail("sequence " + std::to_string(seq_id) + ": " + failed);
      }
      // The tokens of a cached prefix, which this worker is not fed.
      uint32_t pos = 0;
      for (int32_t id : s.getContextTokens())
        if (auto failed = remember_token(seq_id, fresh, pos++, id); !failed.empty()) return fail(failed);
      seqs_[seq_id] = std::move(fresh);
    }
    auto state = seqs_.find(seq_id);
    if (state == seqs_.end()) return fail("sequence " + std::to_string(seq_id) + " has no state (no first slice)");
    states_[i] = &state->second;
    if (s.getTokenIds().size() == 0) return fail("sequence " + std::to_string(seq_id) + ": a slice without tokens");
    if (uint64_t{s.getStartPos()} + s.getTokenIds().size() > static_cast<uint64_t>(INT32_MAX))
      return fail("sequence " + std::to_string(seq_id) + ": positions past 2^31");
    if (s.getForks() > SamplingOptions::kMaxSamples)
      return fail("sequence " + std::to_string(seq_id) + ": " + std::to_string(s.getForks()) + " forks, more than " +
                  std::to_string(SamplingOptions::kMaxSamples));
    const uint32_t drafts = s.getDrafts();
    if (drafts > 0 && (!s.getSample() || s.getForks() > 1 || s.getPromptLogprobsFrom() >= 0 ||
                       s.getFromPrevious() >= 0 || drafts >= s.getTokenIds().size()))
      return fail("sequence " + std::to_string(seq_id) + ": " + std::to_string(drafts) +
                  " draft tokens in a slice that cannot verify them (drafts need a sampling slice of more tokens, "
                  "without forks or prompt logprobs)");
    SeqSlice slice;
    slice.first_token = static_cast<int32_t>(batch_.tokens.size());
    slice.num_tokens = static_cast<int32_t>(s.getTokenIds().size());
    slice.start_pos = static_cast<int32_t>(s.getStartPos());
    slice.lora = state->second.lora;
    sampled_rows += sampled_rows_of(s);
    slice.logit_rows = s.getPromptLogprobsFrom() >= 0 ? slice.num_tokens : static_cast<int32_t>(sampled_rows_of(s));
    prompt_slices_.push_back({seq_id, s.getPromptLogprobsFrom(), s.getNextPromptToken(), s.getSample()});
    if (s.getFromPrevious() >= 0) {
      if (slice.num_tokens != 1)
        return fail("sequence " + std::to_string(seq_id) + " asks for a token the previous step did not sample");
      previous_slots_.emplace_back(batch_.tokens.size(), static_cast<uint32_t>(s.getFromPrevious()));
      batch_.tokens.push_back(-1);
    } else {
      for (int32_t id : s.getTokenIds()) {
        if (id < 0 || id >= vocab) return fail("token id " + std::to_string(id) + " is outside the vocabulary");
        batch_.tokens.push_back(id);
      }
    }
    auto& table = state->second.blocks;
    for (uint32_t b : s.getNewSequence() ? s.getBlockTable() : s.getAppendBlocks()) {
      if (b >= static_cast<uint32_t>(kv_->num_blocks())) return fail("block id " + std::to_string(b) + " out of range");
      table.push_back(b);
    }
    const size_t needed = (static_cast<size_t>(slice.start_pos + slice.num_tokens) + block_size - 1) / block_size;
    if (table.size() < needed) return fail("block table too short for sequence " + std::to_string(seq_id));
    batch_.seqs.push_back(slice);
  }
  // Pointers into the tables are taken once every table of the step is final.
  for (size_t i = 0; i < batch_.seqs.size(); ++i) batch_.seqs[i].block_table = states_[i]->blocks.data();
  // A step that cannot run ahead waits for the pending one's tokens on the host.
  const bool argmax_only = argmax_rows_only(seqs, states_);  // the same answer on every rank
  // The driver's sampling requests, known before the pass.
  size_t forked_rows = 0;
  if (driver()) forked_rows = build_sample_requests(seqs);
  const RunAhead ahead =
      driver() && sampled_rows > 0 ? may_run_ahead(step, seqs, argmax_only, sampled_rows) : RunAhead::no;
  if (pending_ && ahead == RunAhead::no) done.push_back(finish_pending());
  if (auto unresolved = resolve_previous_tokens(); !unresolved.empty()) return break_links(unresolved);
  if (driver()) {  // the penalty history and the response format of the sampling rank
    for (size_t i = 0; i < batch_.seqs.size(); ++i) {
      SequenceState& st = *states_[i];
      if (!st.sampling.has_penalties() && !st.grammar) continue;
      if (auto failed = remember_slice(seqs[i].getSeqId(), st, batch_.seqs[i], seqs[i].getDrafts()); !failed.empty())
        return fail(failed);
    }
    prepare_draft_rows();
    if (auto failed = allow_next_tokens(); !failed.empty()) return fail(failed);
  }

  // The same on every rank: the same step (ranks that serve each other's FFNs always run every micro-batch, some
  // maybe empty, so that their exchanges pair up).
  const bool overlapped =
      !twins_.empty() && overlap_ && !step.getWholeBatch() && (batch_.seqs.size() >= 2 || place_.ep_group());
  context.row_bests = place_.pp_rank == place_.pp - 1 && argmax_only ? &row_bests_ : nullptr;
  row_bests_.clear();  // a forward without logit rows leaves it so
  // Where the driver's rows are in one piece, neither forked nor asked for prompt logprobs, its backend may sample
  // them where the logits are (after the TP gather).
  bool plain_rows = sampled_rows == sample_requests_.size() && !sample_requests_.empty();
  for (uint32_t i = 0; i < seqs.size() && plain_rows; ++i) plain_rows = seqs[i].getPromptLogprobsFrom() < 0;
  const ForwardContext::Sampling sampling{sample_requests_, &samples_};
  samples_.clear();
  context.sampling = plain_rows && !context.row_bests && !overlapped ? &sampling : nullptr;
  // A step that runs ahead: its picks (greedy picks, or the tokens the backend draws) stay on the device for the
  // next step, and reach spare_bests_ / samples_ at finish(). The backend writes there later, so the model's appends
  // (one per piece of a forward pass in pieces) and resizes must never move them: room for every sampled row first.
  const RowBest* deferred_rows = nullptr;
  const SampledToken* deferred_draws = nullptr;
  if (ahead != RunAhead::no) {
    ticket = backend_->defer_reads();
    if (ahead == RunAhead::picks) {
      spare_bests_.clear();
      spare_bests_.reserve(sampled_rows);
      deferred_rows = spare_bests_.data();
      context.row_bests = &spare_bests_;
    } else {
      samples_.reserve(sampled_rows);
      deferred_draws = samples_.data();
      context.row_bests = nullptr;
      context.sampling = &sampling;
    }
  }
  lane_tokens_.assign(size_t(micro_batches_), 0);
  for (uint32_t k = 0; k < step.getLaneTokensPerMicroBatch().size() && k < lane_tokens_.size(); ++k)
    lane_tokens_[k] = step.getLaneTokensPerMicroBatch()[k];
  std::fill(micro_comm_ns_.begin(), micro_comm_ns_.end(), 0);
  if (auto run = overlapped ? forward_overlapped(context, lane_tokens_) : model_->forward(batch_, *kv_, logits_, context);
      !run)
    return break_links(run.error().message);
  const bool decode_only = batch_.tokens.size() == batch_.seqs.size();
  {
    const double walk = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++ahead_counts_.steps;
    ahead_counts_.walk_ms += walk;
    if (decode_only && ahead_counts_.on) ahead_counts_.decode_walk_ms.push_back(walk);
  }
  // Draws the backend did not take (a forward pass in pieces returns the logits): this step is answered now, after
  // the pending one, its rows sampled on the host.
  const bool drawn = ahead == RunAhead::draws && logits_.empty() && samples_.size() == sample_requests_.size();
  if (ahead == RunAhead::draws && !drawn) {
    backend_->complete_reads(std::exchange(ticket, 0));
    if (pending_) done.push_back(finish_pending());
  }
  if (ahead == RunAhead::picks || drawn) {
    ACTORD_CHECK(drawn ? samples_.data() == deferred_draws : spare_bests_.data() == deferred_rows);  // it writes there
    ++ahead_counts_.deferred;
    if (pending_) ++ahead_counts_.behind_pending;
    PendingStep next;
    next.ticket = std::exchange(ticket, 0);
    next.correlation_id = step.getCorrelationId();
    next.step_id = step.getStepId();
    next.start = t0;
    next.idle_us = idle_us;
    if (ahead == RunAhead::picks) {
      next.bests = std::move(spare_bests_);  // the vector's memory, where the backend writes, moves with it
      spare_bests_ = {};
    } else {
      next.draws = std::move(samples_);
      samples_ = {};
    }
    next.seq_ids = sample_seq_ids_;
    next.decode_only = decode_only;
    if (backend_->reads_done(next.ticket)) next.done_at = std::chrono::steady_clock::now();  // a host "device"
    std::optional<PendingStep> older = std::exchange(pending_, std::move(next));
    if (older) done.push_back(finish(*older));
    return std::nullopt;
  }
  // Greedy rows: each rank's best of each row, exchanged (every rank of the stage), when the model gave them.
  const bool picked = context.row_bests && logits_.empty() && row_bests_.size() == sampled_rows;
  const bool sampled_by_backend = context.sampling && logits_.empty() && samples_.size() == sample_requests_.size();
  if (picked) {
    if (auto failed = pick_greedy(); !failed.empty()) return break_links(failed);
  }
  // The step's StepResult: its ids and timings, and what `fill` adds (the driver's samples and prompt logprobs).
  // A step without sequences (an idle attention lane's) is no step of its lane's scheduler: what the previous one
  // sampled stays for the next (whose slices may ask for it).
  const bool lane_step = seqs.size() > 0;
  // Tokens picked from the shards are known to every rank: with one stage, the next step shares none of them.
  if (lane_step) {
    tokens_everywhere_ = picked && place_.pp == 1;
    if (tokens_everywhere_) previous_samples_.assign(greedy_tokens_.begin(), greedy_tokens_.end());
  }
  auto result = [&](auto&& fill) {
    // The step's parallel work is over: the pool's threads sleep now, leaving the cores to the actors that answer
    // this step and hand over the next (spinning, they would delay both; executors/README.md has the measurement).
    if (pool_) pool_->rest();
    if (lane_step) previous_failed_ = false;
    const auto t1 = std::chrono::steady_clock::now();
    const auto busy_from = last_step_end_ ? std::max(t0, *last_step_end_) : t0;  // after a pending step it answered
    last_step_end_ = t1;
    return build<wire::StepResult>([&](wire::StepResult::Builder out) {
      out.setCorrelationId(step.getCorrelationId());
      out.setStepId(step.getStepId());
      fill(out);
      // A stage's expert load, once: its tp rank 0 reports it (every tp rank routes the same); both micro-batches'.
      if (ExpertLoad load = model_->expert_load(); load.num_experts > 0 && place_.tp_rank == 0) {
        if (overlapped) {
          expert_sum_.assign(load.tokens.begin(), load.tokens.end());
          for (const auto& twin : twins_) {
            const ExpertLoad more = twin->expert_load();
            for (size_t i = 0; i < expert_sum_.size() && i < more.tokens.size(); ++i) expert_sum_[i] += more.tokens[i];
          }
          load.tokens = expert_sum_;
        }
        out.setNumExperts(static_cast<uint32_t>(load.num_experts));
        out.setExpertLayerFirst(static_cast<uint32_t>(load.first_layer));
        auto tokens = out.initExpertTokens(static_cast<uint32_t>(load.tokens.size()));
        for (uint32_t i = 0; i < load.tokens.size(); ++i) tokens.set(i, load.tokens[i]);
      }
      out.setComputeMicros(micros_between(busy_from, t1));
      out.setIdleMicros(idle_us);
      uint64_t all_comm_ns = comm_ns;
      for (uint64_t ns : micro_comm_ns_) all_comm_ns += ns;
      out.setCommMicros(all_comm_ns / 1000);
      if (trace) {
        trace_.layer = -1;
        trace_.add("step", "step", StepTrace::ns_of(t0), StepTrace::ns_of(t1));
        for (size_t k = 0; k < micro_traces_.size(); ++k) {
          for (TraceSpan span : micro_traces_[k].spans()) {
            span.micro_batch = static_cast<int>(k + 1);
            trace_.add(span);
          }
        }
        out.setRank(name_);
        out.setClockId(StepTrace::clock_id());
        const auto& spans = trace_.spans();
        auto list = out.initTrace(static_cast<uint32_t>(spans.size()));
        for (uint32_t i = 0; i < spans.size(); ++i) {
          list[i].setName(spans[i].name);
          list[i].setCategory(spans[i].category);
          list[i].setStartNs(spans[i].start_ns);
          list[i].setDurNs(spans[i].dur_ns);
          list[i].setBytes(spans[i].bytes);
          list[i].setLayer(spans[i].layer);
          list[i].setMicroBatch(static_cast<uint32_t>(spans[i].micro_batch));
        }
      }
    });
  };
  // A follower: its part is done; the driver answers for the replica.
  if (!driver()) return result([](wire::StepResult::Builder) {});
  take_prompt_logprobs(vocab);

  float* rows = logits_.data();
  if (forked_rows > sampled_rows) {
    // A forking slice's row is drawn from once per fork (the sampler changes a row in place): one copy each.
    fork_logits_.resize(forked_rows * static_cast<size_t>(vocab));
    size_t row = 0, out = 0;
    for (uint32_t i = 0; i < seqs.size(); ++i) {
      if (!seqs[i].getSample()) continue;
      const uint32_t forks = std::max<uint32_t>(seqs[i].getForks(), 1);
      for (size_t r = 0; r < sampled_rows_of(seqs[i]); ++r, ++row)
        for (uint32_t f = 0; f < forks; ++f, ++out)
          std::copy_n(logits_.data() + row * vocab, vocab, fork_logits_.data() + out * vocab);
    }
    rows = fork_logits_.data();
  }
  samples_.resize(sample_requests_.size());
  {
    TraceScope span(trace, "sampling", "sample");
    if (picked) {
      for (size_t r = 0; r < samples_.size(); ++r) samples_[r] = SampledToken{greedy_tokens_.at(r), 0.0f, {}};
    } else if (!sampled_by_backend) {
      sampler_.sample_rows(rows, vocab, sample_requests_, samples_, *pool_);
    }
  }
  if (lane_step) {
    previous_samples_.clear();
    for (const SampledToken& t : samples_) previous_samples_.push_back(t.token);
  }

  return result([&](wire::StepResult::Builder out) {
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
    for (uint32_t r = 0; r < samples_.size(); ++r) results[r].setSeqId(sample_seq_ids_[r]);
    if (!prompt_logprobs_.empty()) {
      auto chunks = out.initPromptLogprobs(static_cast<uint32_t>(prompt_logprobs_.size()));
      for (uint32_t c = 0; c < prompt_logprobs_.size(); ++c) {
        const PromptLogprobsChunk& chunk = prompt_logprobs_[c];
        chunks[c].setSeqId(chunk.seq_id);
        chunks[c].setFirstPos(chunk.first_pos);
        auto entries = chunks[c].initEntries(static_cast<uint32_t>(chunk.entries.size()));
        for (uint32_t e = 0; e < chunk.entries.size(); ++e) to_wire(chunk.entries[e], entries[e]);
      }
    }
  });
}

Status WorkerCore::forward_overlapped(const ForwardContext& context, const std::vector<uint32_t>& lane_tokens) {
  // Whole sequences, cut where the micro-batches' tokens are most even (as the scheduler cuts them).
  const size_t n = batch_.seqs.size();
  const std::vector<size_t> bounds =
      micro_batch_bounds(n, micro_batches_, [&](size_t i) { return batch_.seqs[i].num_tokens; });
  for (size_t m = 0; m < micro_.size(); ++m) {
    ForwardBatch& mb = micro_[m];
    mb.tokens.clear();
    mb.seqs.clear();
    for (size_t i = bounds[m]; i < bounds[m + 1]; ++i) {
      SeqSlice slice = batch_.seqs[i];
      slice.first_token = static_cast<int32_t>(mb.tokens.size());
      mb.tokens.insert(mb.tokens.end(), batch_.tokens.begin() + batch_.seqs[i].first_token,
                       batch_.tokens.begin() + batch_.seqs[i].first_token + batch_.seqs[i].num_tokens);
      mb.seqs.push_back(slice);
    }
  }
  std::vector<ForwardContext> contexts(micro_.size(), context);
  std::vector<Status> ran(micro_.size());
  std::vector<std::function<void()>> tasks;
  for (size_t m = 0; m < micro_.size(); ++m) {
    ForwardContext& c = contexts[m];
    c.lane_tokens = static_cast<int>(lane_tokens[m]);
    if (m > 0) {
      const RankLinks::MicroBatch& links = links_.micro[m - 1];
      c.tp = links.tp.get();
      c.pipeline = links.pipeline.get();
      c.ep = links.ep.get();
      c.comm_ns = &micro_comm_ns_[m - 1];
      c.trace = context.trace ? &micro_traces_[m - 1] : nullptr;
    }
    if (context.row_bests) {
      micro_bests_[m].clear();
      c.row_bests = &micro_bests_[m];
    }
    Model* model = m == 0 ? model_.get() : twins_[m - 1].get();
    tasks.push_back([&, m, model] { ran[m] = model->forward(micro_[m], *kv_, micro_logits_[m], contexts[m]); });
  }
  overlap_->run(tasks);
  logits_.clear();
  if (context.row_bests) context.row_bests->clear();
  for (size_t m = 0; m < micro_.size(); ++m) {
    if (!ran[m]) return ran[m];
    logits_.insert(logits_.end(), micro_logits_[m].begin(), micro_logits_[m].end());
    if (context.row_bests)
      context.row_bests->insert(context.row_bests->end(), micro_bests_[m].begin(), micro_bests_[m].end());
  }
  return {};
}

std::string WorkerCore::resolve_previous_tokens() {
  if (previous_slots_.empty()) return {};
  if (pending_) {  // running ahead of it (a lone rank): its tokens are its picks, still on the device
    for (const auto& [at, index] : previous_slots_) {
      if (index >= pending_->seq_ids.size()) return "a slice asks for a token the previous step did not sample";
      batch_.tokens[at] = previous_pick(index);
    }
    return {};
  }
  const size_t n = previous_slots_.size();
  exchanged_.resize(n);
  if (driver() || tokens_everywhere_) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t index = previous_slots_[i].second;
      exchanged_[i] = !previous_failed_ && index < previous_samples_.size() ? previous_samples_[index] : -1;
    }
  }
  // Only the first stage embeds tokens: the driver's values go to its tp rank 0 (pipeline), which hands them to
  // the stage's other TP ranks (an all-gather in which only rank 0 contributes).
  const auto bytes = std::as_writable_bytes(std::span<int32_t>(exchanged_));
  if (place_.pp > 1 && place_.tp_rank == 0 && (driver() || place_.pp_rank == 0)) {
    const Status moved =
        driver() ? links_.pipeline->send_bytes(0, bytes) : links_.pipeline->recv_bytes(place_.pp - 1, bytes);
    if (!moved) return moved.error().message;
  }
  if (place_.tp > 1 && place_.pp_rank == 0 && !tokens_everywhere_) {
    std::vector<size_t> counts(static_cast<size_t>(place_.tp), 0);
    counts[0] = bytes.size();
    std::vector<std::byte> mine(place_.tp_rank == 0 ? bytes.begin() : bytes.end(), bytes.end());
    const Status shared = links_.tp->all_gather_bytes(mine, bytes, counts);
    if (!shared) return shared.error().message;
  }
  if (place_.pp_rank != 0 && !driver()) return {};  // a later stage's follower: it does not embed tokens
  for (size_t i = 0; i < n; ++i) {
    if (exchanged_[i] < 0) return "a slice asks for a token the previous step did not sample";
    batch_.tokens[previous_slots_[i].first] = exchanged_[i];
  }
  return {};
}

void WorkerCore::take_prompt_logprobs(int vocab) {
  prompt_logprobs_.clear();
  bool any = false;
  for (const PromptSlice& s : prompt_slices_) any = any || s.from >= 0;
  if (!any) return;
  // Rows: num_tokens per slice with prompt logprobs, the sampled ones per other slice. The prompt rows are turned
  // into logprobs; a prompt slice's last row, if it samples, is moved down so that logits_ holds the sampled rows
  // only (other slices' rows move down whole).
  size_t row = 0, kept = 0;
  for (size_t i = 0; i < batch_.seqs.size(); ++i) {
    const SeqSlice& slice = batch_.seqs[i];
    const bool all_logits = prompt_slices_[i].from >= 0;
    const size_t rows = static_cast<size_t>(slice.logit_rows);
    if (all_logits) {
      const SequenceState& st = *states_[i];
      const int64_t from = prompt_slices_[i].from;
      PromptLogprobsChunk chunk;
      chunk.seq_id = prompt_slices_[i].seq_id;
      for (int32_t r = 0; r < slice.num_tokens; ++r) {
        const int64_t target = slice.start_pos + r + 1;  // the position row r predicts
        if (target < from || target >= static_cast<int64_t>(st.prompt_len)) continue;
        const int32_t token = r + 1 < slice.num_tokens ? batch_.tokens[static_cast<size_t>(slice.first_token + r + 1)]
                                                       : prompt_slices_[i].next_token;
        if (chunk.entries.empty()) chunk.first_pos = static_cast<uint32_t>(target);
        chunk.entries.push_back(prompt_sampler_.logprobs_of(logits_.data() + (row + r) * vocab, vocab, token,
                                                            std::max(st.sampling.prompt_logprobs, 0)));
      }
      if (!chunk.entries.empty()) prompt_logprobs_.push_back(std::move(chunk));
    }
    const size_t sampled = all_logits ? size_t{prompt_slices_[i].samples} : rows;
    if (sampled > 0) {
      std::memmove(logits_.data() + kept * vocab, logits_.data() + (row + rows - sampled) * vocab,
                   sizeof(float) * vocab * sampled);
      kept += sampled;
    }
    row += rows;
  }
  logits_.resize(kept * static_cast<size_t>(vocab));
}

}  // namespace actord
