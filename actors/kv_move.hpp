// A running sequence moving to another replica with its KV (a reshape; engine.reshape_kv: move), in messages:
// the old replica's scheduler asks each KV rank of the sequence's lane for its shard (ExportKv -> KvExport: its
// stage's layers, its KV heads), gathers them into the whole model's blocks (memory/kv_relayout.hpp) and sends the
// continuation with them (SubmitRequest.kv, the bytes as bulk[0]); the new replica's scheduler takes blocks from
// its lease and sends every KV rank of a lane the whole blocks with those ids (ImportKv): each rank writes its own
// layers and heads, whatever the new TP / PP shape. Then the sequence computes only from the moved positions on.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comms/schemas/actord.capnp.h"
#include "comms/wire_msg.hpp"
#include "memory/kv_relayout.hpp"

namespace actord {

// The shard a KvLayout describes (elem_bytes 0 when its dtype is unknown: compatible with nothing), and back.
KvShard kv_shard_of(wire::KvLayout::Reader layout);
void set_kv_layout(wire::KvLayout::Builder out, const KvShard& shard, const std::string& dtype);

// The whole model's KV of one sequence from its ranks' exports (one per KV rank of its lane, each its shard), as a
// KvExport with the bytes in bulk[0]; nothing when an export failed, they disagree (tokens, block size, dtype) or do
// not cover every layer and head together.
std::optional<wire_msg> gather_kv(std::span<const wire_msg> exports);

// The KV a submission carries: its number of positions (0: none, or malformed).
int kv_tokens_of(const wire_msg& submit);

// The ImportKv that writes a submission's KV (kv_tokens_of > 0) into blocks `block_ids` of a rank.
wire_msg import_request_of(const wire_msg& submit, const std::vector<uint32_t>& block_ids);

// The ExportKv asking a rank for sequence `seq_id`'s first `num_tokens` positions.
wire_msg export_request(uint64_t seq_id, int num_tokens);

}  // namespace actord
