#include "actors/kv_move.hpp"

#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "core/dtype.hpp"
#include "memory/kv_relayout.hpp"

namespace actord {

KvShard kv_shard_of(wire::KvLayout::Reader layout) {
  KvShard s;
  s.num_layers = static_cast<int>(layout.getNumLayers());
  s.num_heads = static_cast<int>(layout.getNumKvHeads());
  s.total_layers = layout.getTotalLayers() > 0 ? static_cast<int>(layout.getTotalLayers()) : s.num_layers;
  s.total_heads = layout.getTotalKvHeads() > 0 ? static_cast<int>(layout.getTotalKvHeads()) : s.num_heads;
  s.first_layer = static_cast<int>(layout.getFirstLayer());
  s.first_head = static_cast<int>(layout.getFirstKvHead());
  s.head_dim = static_cast<int>(layout.getHeadDim());
  s.block_size = static_cast<int>(layout.getBlockSize());
  auto dtype = parse_kv_dtype(std::string_view(layout.getDtype().cStr()));
  if (dtype) s.set_dtype(*dtype);  // else elem_bytes 0: compatible with nothing
  return s;
}

void set_kv_layout(wire::KvLayout::Builder out, const KvShard& shard, const std::string& dtype) {
  out.setNumLayers(static_cast<uint32_t>(shard.num_layers));
  out.setNumKvHeads(static_cast<uint32_t>(shard.num_heads));
  out.setHeadDim(static_cast<uint32_t>(shard.head_dim));
  out.setBlockSize(static_cast<uint32_t>(shard.block_size));
  out.setDtype(dtype);
  out.setFirstLayer(static_cast<uint32_t>(shard.first_layer));
  out.setFirstKvHead(static_cast<uint32_t>(shard.first_head));
  out.setTotalLayers(static_cast<uint32_t>(shard.total_layers));
  out.setTotalKvHeads(static_cast<uint32_t>(shard.total_heads));
}

std::optional<wire_msg> gather_kv(std::span<const wire_msg> exports) try {
  if (exports.empty()) return std::nullopt;
  std::optional<KvShard> whole;
  std::string dtype;
  uint32_t num_tokens = 0, num_blocks = 0;
  std::vector<unsigned char> bytes;
  // Which (layer, head) pairs the exports filled: together they must hold every one.
  std::vector<uint8_t> filled;
  for (const wire_msg& msg : exports) {
    WireReader reader(msg);
    auto e = reader.root<wire::KvExport>();
    if (has_error(e.getError())) return std::nullopt;
    const KvShard s = kv_shard_of(e.getLayout());
    if (s.elem_bytes == 0 || msg.bulk.size() != 1 || msg.bulk[0].size() != size_t(e.getNumBlocks()) * s.block_bytes())
      return std::nullopt;
    if (!whole) {
      whole = KvShard::whole(s.total_layers, s.total_heads, s.head_dim, s.block_size, s.elem_bytes, s.scale_bytes);
      dtype = e.getLayout().getDtype().cStr();
      num_tokens = e.getNumTokens();
      num_blocks = e.getNumBlocks();
      bytes.assign(whole->block_bytes() * num_blocks, 0);
      filled.assign(size_t(whole->total_layers) * size_t(whole->total_heads), 0);
    }
    if (!s.compatible(*whole) || !whole->covers(s) || dtype != e.getLayout().getDtype().cStr() ||
        e.getNumTokens() != num_tokens || e.getNumBlocks() != num_blocks)
      return std::nullopt;
    copy_kv_overlap(msg.bulk[0].data(), s, bytes.data(), *whole, num_blocks);
    for (int l = s.first_layer; l < s.first_layer + s.num_layers; ++l)
      for (int h = s.first_head; h < s.first_head + s.num_heads; ++h) filled[size_t(l) * size_t(whole->total_heads) + size_t(h)] = 1;
  }
  for (uint8_t f : filled)
    if (!f) return std::nullopt;
  wire_msg out = build<wire::KvExport>([&](wire::KvExport::Builder b) {
    b.setNumTokens(num_tokens);
    set_kv_layout(b.initLayout(), *whole, dtype);
    b.setBlockBytes(whole->block_bytes());
    b.setNumBlocks(num_blocks);
  });
  out.bulk.push_back(std::move(bytes));
  return out;
} catch (const std::exception&) {  // a malformed export (or none: a rank that did not answer)
  return std::nullopt;
}

int kv_tokens_of(const wire_msg& submit) {
  try {
    WireReader reader(submit);
    auto in = reader.root<wire::SubmitRequest>();
    if (!in.hasKv() || submit.bulk.size() != 1) return 0;
    return static_cast<int>(in.getKv().getNumTokens());
  } catch (const std::exception&) {
    return 0;
  }
}

wire_msg import_request_of(const wire_msg& submit, const std::vector<uint32_t>& block_ids) {
  WireReader reader(submit);
  wire_msg out = build<wire::ImportKv>([&](wire::ImportKv::Builder b) {
    b.setExport(reader.root<wire::SubmitRequest>().getKv());
    fill_list(b.initBlockIds(static_cast<uint32_t>(block_ids.size())), block_ids);
  });
  out.bulk = submit.bulk;
  return out;
}

wire_msg export_request(uint64_t seq_id, int num_tokens) {
  return build<wire::ExportKv>([&](wire::ExportKv::Builder b) {
    b.setSeqId(seq_id);
    b.setNumTokens(static_cast<uint32_t>(num_tokens));
  });
}

}  // namespace actord
