// WorkerCore's KV moves: the shard a rank holds, a held sequence's blocks exported, and blocks imported into its
// pool (actors/worker_core.hpp).
#include <string>

#include "actors/kv_move.hpp"
#include "actors/worker_core.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "memory/kv_relayout.hpp"

namespace actord {

// The shard of the whole model's KV this rank's cache holds (memory/kv_relayout.hpp).
KvShard WorkerCore::kv_shard() const {
  const KvShape shape = model_->kv_shape();
  KvShard out;
  out.total_layers = shape.total_layers > 0 ? shape.total_layers : kv_->num_layers();
  out.total_heads = shape.total_kv_heads > 0 ? shape.total_kv_heads : kv_->num_kv_heads();
  out.first_layer = shape.first_layer;
  out.num_layers = kv_->num_layers();
  out.first_head = shape.first_kv_head;
  out.num_heads = kv_->num_kv_heads();
  out.head_dim = kv_->head_dim();
  out.block_size = kv_->block_size();
  out.set_dtype(kv_->dtype());
  return out;
}

namespace {

std::string describe_shard(const KvShard& s, const std::string& dtype) {
  return "layers " + std::to_string(s.first_layer) + ".." + std::to_string(s.first_layer + s.num_layers) + " of " +
         std::to_string(s.total_layers) + ", KV heads " + std::to_string(s.first_head) + ".." +
         std::to_string(s.first_head + s.num_heads) + " of " + std::to_string(s.total_heads) + ", head_dim " +
         std::to_string(s.head_dim) + ", block_size " + std::to_string(s.block_size) + ", " + dtype;
}

}  // namespace

wire_msg WorkerCore::export_kv(const wire_msg& msg) {
  WireReader reader(msg);
  auto req = reader.root<wire::ExportKv>();
  const uint64_t seq_id = req.getSeqId();
  const uint32_t num_tokens = req.getNumTokens();
  std::optional<Error> failure;
  const SequenceState* state = nullptr;
  size_t num_blocks = 0;
  if (!kv_ || kv_->num_layers() == 0) {
    failure = Error{Errc::unsupported, name_ + ": no KV cache here (not loaded yet, or an FFN rank)"};
  } else if (auto it = seqs_.find(seq_id); it == seqs_.end()) {
    failure = Error{Errc::not_found, name_ + ": sequence " + std::to_string(seq_id) + " is not held by this worker"};
  } else {
    state = &it->second;
    num_blocks = (static_cast<size_t>(num_tokens) + kv_->block_size() - 1) / kv_->block_size();
    if (num_blocks > state->blocks.size()) {
      failure = Error{Errc::invalid_argument, name_ + ": sequence " + std::to_string(seq_id) + " holds " +
                                                  std::to_string(state->blocks.size()) + " blocks, fewer than " +
                                                  std::to_string(num_tokens) + " tokens need"};
    }
  }
  wire_msg out = build<wire::KvExport>([&](wire::KvExport::Builder b) {
    b.setCorrelationId(req.getCorrelationId());
    b.setSeqId(seq_id);
    if (failure) {
      set_error(b.initError(), *failure);
      return;
    }
    b.setNumTokens(num_tokens);
    set_kv_layout(b.initLayout(), kv_shard(), dtype_name(kv_->dtype()));
    b.setBlockBytes(kv_->block_bytes());
    b.setNumBlocks(static_cast<uint32_t>(num_blocks));
  });
  if (!failure) {
    auto& bytes = out.bulk.emplace_back(num_blocks * kv_->block_bytes());
    for (size_t i = 0; i < num_blocks; ++i) kv_->read_block(state->blocks[i], bytes.data() + i * kv_->block_bytes());
  }
  return out;
}

// The export may hold more than this rank's shard (the whole model's KV, gathered from another shape's ranks):
// this rank takes its layers and heads from it.
wire_msg WorkerCore::import_kv(const wire_msg& msg) {
  WireReader reader(msg);
  auto req = reader.root<wire::ImportKv>();
  auto exp = req.getExport();
  auto ids = req.getBlockIds();
  std::optional<Error> failure;
  auto refuse = [&](const std::string& why) { failure = Error{Errc::invalid_argument, name_ + ": KV import: " + why}; };
  if (!kv_ || kv_->num_layers() == 0) {
    failure = Error{Errc::unsupported, name_ + ": no KV cache here (not loaded yet, or an FFN rank)"};
  } else {
    const KvShard here = kv_shard();
    const std::string here_dtype = dtype_name(kv_->dtype());
    const std::string there_dtype = std::string(exp.getLayout().getDtype());
    const KvShard there = kv_shard_of(exp.getLayout());
    const size_t n = exp.getNumBlocks();
    if (has_error(exp.getError())) {
      refuse("the export failed: " + get_error(exp.getError()).message);
    } else if (there_dtype != here_dtype || !there.compatible(here) || !there.covers(here) ||
               exp.getBlockBytes() != there.block_bytes()) {
      refuse("the blocks have layout (" + describe_shard(there, there_dtype) + "), which does not cover this rank's (" +
             describe_shard(here, here_dtype) + ")");
    } else if (msg.bulk.size() != 1 || msg.bulk[0].size() != n * there.block_bytes()) {
      refuse("expected one bulk frame of " + std::to_string(n * there.block_bytes()) + " bytes");
    } else if (ids.size() != n) {
      refuse(std::to_string(n) + " blocks exported, " + std::to_string(ids.size()) + " block ids given");
    } else {
      for (uint32_t id : ids)
        if (id >= static_cast<uint32_t>(kv_->num_blocks())) refuse("block id " + std::to_string(id) + " out of range");
    }
    if (!failure) {
      const bool same = there == here;
      std::vector<unsigned char> block(same ? 0 : here.block_bytes());
      for (uint32_t i = 0; i < n; ++i) {
        const unsigned char* src = msg.bulk[0].data() + size_t(i) * there.block_bytes();
        if (!same) {
          copy_kv_overlap(src, there, block.data(), here, 1);
          src = block.data();
        }
        kv_->write_block(ids[i], src);
      }
    }
  }
  return build<wire::KvImported>([&](wire::KvImported::Builder b) {
    b.setCorrelationId(req.getCorrelationId());
    if (failure) set_error(b.initError(), *failure);
  });
}

}  // namespace actord
