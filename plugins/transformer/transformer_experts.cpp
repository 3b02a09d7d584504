// The transformer's mixture-of-experts layers: routing, the experts on one rank or over the ranks of an expert
// parallel group (dispatch and combine), EPLB placements and the expert moves they call for.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "comms/collectives/communicator.hpp"
#include "plugins/transformer/transformer_internal.hpp"
#include "plugins/transformer/transformer_model.hpp"

namespace actord {

using transformer_detail::expert_names;
using transformer_detail::ExpertNames;
using transformer_detail::timed;

Result<TransformerModel::Expert> TransformerModel::load_expert(int layer, int e) {
  const ExpertNames n = expert_names(spec_, "model.layers." + std::to_string(layer) + ".", e);
  const int ff = spec_.expert_intermediate > 0 ? spec_.expert_intermediate : cfg_.intermediate_size;
  const int h = cfg_.hidden_size;
  Expert x;
  x.ff = ff;
  auto down = store_->weight(*backend_, n.down, h, ff, exec::WeightUse::gemm, MatrixSlice{});
  if (!down) return down.error();
  x.down = *down;
  if (spec_.activation == Activation::silu) {  // gate and up fused, as create() loads them
    auto fused = store_->glu_weight(*backend_, n.gate, n.up, ff, h, 0, ff);
    if (!fused) return fused.error();
    x.gate_up = *fused;
    return x;
  }
  auto gate = store_->weight(*backend_, n.gate, ff, h, exec::WeightUse::gemm, MatrixSlice{});
  if (!gate) return gate.error();
  auto up = store_->weight(*backend_, n.up, ff, h, exec::WeightUse::gemm, MatrixSlice{});
  if (!up) return up.error();
  x.gate = *gate;
  x.up = *up;
  return x;
}

Status TransformerModel::set_expert_placement(std::span<const int32_t> placement, const ForwardContext& context) {
  if (place_.ep <= 1 || spec_.num_experts == 0)
    return TransformerModel::Model::set_expert_placement(placement, context);
  const int ep = place_.ep, per_rank = spec_.num_experts / ep + place_.redundant_experts, slots = ep * per_rank;
  if (placement.size() != size_t(cfg_.num_layers) * size_t(slots)) {
    return make_error(Errc::invalid_argument, "expert placement: " + std::to_string(placement.size()) +
                                                  " entries, the model needs " + std::to_string(cfg_.num_layers) +
                                                  " layers x " + std::to_string(slots) + " slots");
  }
  // Every layer checked before any changes: a bad placement leaves the old one whole.
  for (int l = 0; l < shard_.layers.count; ++l) {
    if (!layers_[size_t(l)].sparse) continue;
    const int global = shard_.layers.first + l;
    std::vector<bool> placed(size_t(spec_.num_experts), false);
    for (int s = 0; s < slots; ++s) {
      const int32_t e = placement[size_t(global) * size_t(slots) + size_t(s)];
      if (e < 0 || e >= spec_.num_experts)
        return make_error(Errc::invalid_argument, "expert placement: layer " + std::to_string(global) +
                                                      " names expert " + std::to_string(e));
      placed[size_t(e)] = true;
    }
    if (std::find(placed.begin(), placed.end(), false) != placed.end())
      return make_error(Errc::invalid_argument,
                        "expert placement: layer " + std::to_string(global) + " leaves an expert without a slot");
  }
  coll::Communicator* comm = context.ep ? context.ep : context.tp;
  if (!comm || comm->size() != ep || comm->rank() != place_.ep_rank()) {
    return make_error(Errc::invalid_argument, "expert placement: EP rank " + std::to_string(place_.ep_rank()) +
                                                  " of " + std::to_string(ep) +
                                                  " needs its EP communicator in the context");
  }
  for (int l = 0; l < shard_.layers.count; ++l) {
    Layer& L = layers_[size_t(l)];
    if (!L.sparse) continue;
    const int global = shard_.layers.first + l;
    ExpertPlacement next = L.placement;
    next.slot_expert.assign(placement.begin() + ptrdiff_t(global) * slots,
                            placement.begin() + ptrdiff_t(global + 1) * slots);
    ACTORD_TRY_STATUS(move_experts(L, next, *comm, context));
  }
  return {};
}

namespace {

// An expert's weights in the order they travel: the fused gate-up (SiLU models) or gate and up, then down.
template <class ExpertT>
auto parts_of(ExpertT& x) {
  std::vector<decltype(&x.down)> parts;
  for (auto* w : {&x.gate_up, &x.gate, &x.up, &x.down})
    if (*w) parts.push_back(w);
  return parts;
}

}  // namespace

// A slot keeps an expert its rank already holds; an expert it gains comes from the lowest rank holding it in the
// old placement, as the bytes that rank's backend holds (its layout, no re-reading or re-layout: a CPU rank hands
// its blocked matrices over). Every rank derives every transfer from the two placements, so one all-to-all of the
// weights' bytes moves them all (slot order per destination, then part order); a rank with nothing to send or
// receive still takes part.
Status TransformerModel::move_experts(Layer& L, const ExpertPlacement& next, coll::Communicator& comm,
                                      const ForwardContext& context) {
  exec::Backend& be = *backend_;
  const ExpertPlacement& old = L.placement;
  const int ep = place_.ep, per_rank = next.slots_per_rank, me = place_.ep_rank();
  const auto held_at = [&](int rank, int e) {  // the rank's old slot (0 .. per_rank - 1) of expert e, or -1
    for (int j = 0; j < per_rank; ++j)
      if (old.slot_expert[size_t(rank * per_rank + j)] == e) return j;
    return -1;
  };
  const auto source_of = [&](int e) {
    for (int r = 0; r < ep; ++r)
      if (held_at(r, e) >= 0) return r;
    return -1;
  };
  std::vector<std::byte> out;
  std::vector<size_t> send_counts(size_t(ep), 0);
  for (int d = 0; d < ep; ++d) {
    for (int j = 0; j < per_rank; ++j) {
      const int e = next.slot_expert[size_t(d * per_rank + j)];
      if (held_at(d, e) >= 0 || source_of(e) != me) continue;
      for (const exec::Weight* w : parts_of(L.slots[size_t(held_at(me, e))])) {
        const std::span<const std::byte> bytes = be.weight_bytes(*w);
        if (bytes.empty())
          return make_error(Errc::unsupported, "expert placement: " + be.describe() + " cannot hand out an expert");
        out.insert(out.end(), bytes.begin(), bytes.end());
        send_counts[size_t(d)] += bytes.size();
      }
    }
  }
  std::vector<std::byte> in;
  std::vector<size_t> recv_counts;
  ACTORD_TRY_STATUS(timed(context, [&] { return comm.all_to_all_bytes(out, send_counts, in, recv_counts); }));
  std::vector<size_t> cursor(size_t(ep), 0), block_end(size_t(ep), 0);
  for (int r = 0, at = 0; r < ep; ++r) {
    cursor[size_t(r)] = size_t(at);
    at += int(recv_counts[size_t(r)]);
    block_end[size_t(r)] = size_t(at);
  }
  const Expert like = L.slots.front();  // every expert of a layer has the same shape and layout
  std::vector<Expert> slots_now;
  for (int j = 0; j < per_rank; ++j) {
    const int e = next.slot_expert[size_t(me * per_rank + j)];
    if (const int have = held_at(me, e); have >= 0) {
      slots_now.push_back(L.slots[size_t(have)]);
      continue;
    }
    const size_t q = size_t(source_of(e));
    Expert x = like;
    auto model_parts = parts_of(like);
    auto new_parts = parts_of(x);
    for (size_t p = 0; p < new_parts.size(); ++p) {
      const size_t n = be.weight_bytes(*model_parts[p]).size();
      if (cursor[q] + n > block_end[q])
        return make_error(Errc::internal, "expert placement: rank " + std::to_string(q) + " sent too few bytes");
      auto made = be.weight_from_bytes(*model_parts[p], std::span<const std::byte>(in).subspan(cursor[q], n));
      if (!made) return made.error();
      *new_parts[p] = *made;
      cursor[q] += n;
    }
    slots_now.push_back(std::move(x));
  }
  for (int r = 0; r < ep; ++r) {
    if (cursor[size_t(r)] != block_end[size_t(r)])
      return make_error(Errc::internal, "expert placement: rank " + std::to_string(r) + " sent other bytes than the "
                                                                                         "placements call for");
  }
  L.slots = std::move(slots_now);
  L.placement = next;
  return {};
}

// Routing as HF computes it (Mixtral, Qwen3-MoE): softmax over all experts in f32, keep the top k, renormalise them
// to 1 (norm_topk_prob; Mixtral always). The decision is taken on the host from the router's logits, the same on
// every rank (the router is replicated): routed_[e] lists expert e's tokens in order, with their weights.
void TransformerModel::route(const Layer& L, int l, int n) {
  exec::Backend& be = *backend_;
  const int n_exp = spec_.num_experts, top_k = spec_.experts_per_token;
  be.reserve(router_logits_, size_t(n) * n_exp);
  be.gemm(xn_, L.router, nullptr, router_logits_, n);
  router_host_.resize(size_t(n) * n_exp);
  be.download(router_logits_, 0, router_host_);
  routed_.resize(size_t(n_exp));
  for (Routed& r : routed_) {
    r.rows.clear();
    r.weights.clear();
  }
  std::vector<std::pair<float, int>> probs(n_exp);
  for (int t = 0; t < n; ++t) {
    const float* lg = router_host_.data() + size_t(t) * n_exp;
    const float mx = *std::max_element(lg, lg + n_exp);
    float sum = 0.0f;
    for (int e = 0; e < n_exp; ++e) sum += (probs[e].first = std::exp(lg[e] - mx));
    for (int e = 0; e < n_exp; ++e) {
      probs[e].first /= sum;
      probs[e].second = e;
    }
    std::partial_sort(probs.begin(), probs.begin() + top_k, probs.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    float kept = 0.0f;
    for (int i = 0; i < top_k; ++i) kept += probs[i].first;
    if (!spec_.norm_topk_prob) kept = 1.0f;
    for (int i = 0; i < top_k; ++i) {
      Routed& r = routed_[static_cast<size_t>(probs[i].second)];
      r.rows.push_back(t);
      r.weights.push_back(probs[i].first / kept);
    }
  }
  for (int e = 0; e < n_exp; ++e)
    expert_tokens_[size_t(l) * n_exp + size_t(e)] += static_cast<uint32_t>(routed_[size_t(e)].rows.size());
}

ExpertLoad TransformerModel::expert_load() const {
  if (spec_.num_experts == 0) return {};
  return {shard_.layers.first, spec_.num_experts, expert_tokens_};
}

// tmp_ = the layer's MoE output: each token's experts weighted (in expert order), + the shared expert. Under EP the
// routed part is this rank's tokens' only (zero elsewhere) and the caller's TP all-reduce completes it.
Status TransformerModel::moe(const Layer& L, int l, int n, const ForwardContext& context) {
  exec::Backend& be = *backend_;
  const int h = cfg_.hidden_size, n_exp = spec_.num_experts;
  route(L, l, n);
  be.zero(tmp_, size_t(n) * h);
  if (place_.ep > 1 || place_.afd()) {
    ACTORD_TRY_STATUS(experts_over_ranks(L, n, context));
  } else {
    for (int e = 0; e < n_exp; ++e) {
      const Routed& r = routed_[static_cast<size_t>(e)];
      if (r.rows.empty()) continue;
      const int ne = static_cast<int>(r.rows.size());
      be.reserve(xe_, size_t(ne) * h);
      be.reserve(ye_, size_t(ne) * h);
      be.gather_rows(xn_, r.rows, h, xe_);
      mlp(L.experts[e], xe_, ye_, ne);
      be.scatter_add_rows(ye_, r.rows, r.weights, h, tmp_);
    }
  }
  if (L.shared_gate) {  // Qwen2-MoE: + sigmoid(x g^T) * shared_expert(x), row by row
    be.reserve(ye_, size_t(n) * h);
    be.reserve(shared_logits_, size_t(n));
    mlp(L.shared, xn_, ye_, n);
    be.gemm(xn_, L.shared_gate, nullptr, shared_logits_, n);
    shared_weights_.resize(size_t(n));
    be.download(shared_logits_, 0, shared_weights_);
    for (float& w : shared_weights_) w = 1.0f / (1.0f + std::exp(-w));
    all_rows_.resize(size_t(n));
    for (int t = 0; t < n; ++t) all_rows_[size_t(t)] = t;
    be.scatter_add_rows(ye_, all_rows_, shared_weights_, h, tmp_);
  }
  return {};
}

// Expert parallelism: the experts live in slots over the replica's ep ranks (L.placement; whole experts, hot ones
// copied to several). A rank owns a balanced share of its batch among the tp ranks that run it
// (balanced_offset(n, tp, tp_rank) ...): the step's batch when ep == tp, its attention lane's batch with lanes.
// Dispatch (one all-to-all over the EP communicator: the TP one without lanes): to each rank, a header of that
// rank's slots' row counts (floats, exact below 2^24), then the rows of the owned tokens routed to each of its
// slots (ExpertPlacement::slot_for), slot by slot, token by token. A rank runs each of its slots over the rows that
// came for it from every rank and sends the outputs back in the order they came (combine, a second all-to-all); the
// owner adds them to its tokens' rows of tmp_ with their routing weights in expert order, as one rank adds them:
// the result depends neither on the placement nor on the lanes. Only the routed rows travel; a rank with no tokens
// (an idle lane's) still serves its slots.
//
// AFD: the EP group is the attention ranks, then the FFN ranks; only the FFN ranks (pl.ep of them, from EP rank
// servers_first on) hold slots, and a block to a rank without slots is empty (no header).
Status TransformerModel::experts_over_ranks(const Layer& L, int n, const ForwardContext& context) {
  exec::Backend& be = *backend_;
  coll::Communicator& comm = context.ep ? *context.ep : *context.tp;
  const ExpertPlacement& pl = L.placement;
  const int h = cfg_.hidden_size, servers = pl.ep, per_rank = pl.slots_per_rank, me = place_.expert_rank();
  const int ranks = place_.ep_group_size(), servers_first = place_.afd() ? place_.afd_attention : 0;
  const size_t width = size_t(h), header = size_t(per_rank), slots = size_t(servers) * header;
  // The header of a block to EP rank d (its slots' row counts), and where d's slots start (server index * per_rank).
  const auto header_to = [&](int d) { return d >= servers_first && d < servers_first + servers ? header : 0; };
  const size_t my_header = me >= 0 ? header : 0;
  const auto own_first = static_cast<int32_t>(coll::balanced_offset(size_t(n), place_.tp, place_.tp_rank));
  const auto own_end = own_first + static_cast<int32_t>(coll::balanced_count(size_t(n), place_.tp, place_.tp_rank));
  // Each routed (token, expert) this rank owns: the slot serving it (-1: a token of another tp rank of the lane).
  for (int e = 0; e < static_cast<int>(routed_.size()); ++e) {
    Routed& routed = routed_[size_t(e)];
    routed.slots.resize(routed.rows.size());
    for (size_t i = 0; i < routed.rows.size(); ++i) {
      const int32_t t = routed.rows[i];
      routed.slots[i] = t >= own_first && t < own_end ? pl.slot_for(t, e, me) : -1;
    }
  }
  // Dispatch order: destination rank, slot, token.
  ep_send_rows_.clear();
  ep_send_experts_.clear();
  ep_send_weights_.clear();
  ep_slot_rows_.assign(slots, 0);
  for (size_t slot = 0; slot < slots; ++slot) {
    const int e = pl.slot_expert[slot];
    const Routed& routed = routed_[size_t(e)];
    for (size_t i = 0; i < routed.rows.size(); ++i) {
      if (routed.slots[i] != int32_t(slot)) continue;
      ep_send_rows_.push_back(routed.rows[i]);
      ep_send_experts_.push_back(e);
      ep_send_weights_.push_back(routed.weights[i]);
      ++ep_slot_rows_[slot];
    }
  }
  const size_t sent = ep_send_rows_.size();
  ep_send_.resize(slots + sent * width);
  ep_send_counts_.assign(size_t(ranks), 0);
  for (size_t d = 0, at = 0, first_row = 0; d < size_t(ranks); ++d) {
    size_t rows = 0;
    for (size_t j = 0; j < header_to(int(d)); ++j) {
      const size_t slot = (d - size_t(servers_first)) * header + j;
      ep_send_[at++] = static_cast<float>(ep_slot_rows_[slot]);
      rows += ep_slot_rows_[slot];
    }
    if (rows > 0) {
      std::optional<exec::Buffer> block = be.host_view(std::span<float>(ep_send_).subspan(at, rows * width));
      ACTORD_CHECK(block.has_value());  // create() refuses ep > 1 on a backend computing elsewhere
      be.gather_rows(xn_, std::span<const int32_t>(ep_send_rows_).subspan(first_row, rows), h, *block);
    }
    at += rows * width;
    first_row += rows;
    ep_send_counts_[d] = header_to(int(d)) + rows * width;
  }
  ACTORD_TRY_STATUS(timed(context, [&] {
    return comm.all_to_all(std::span<const float>(ep_send_), ep_send_counts_, ep_received_, ep_recv_counts_);
  }));
  // What arrived from rank s: its header (my_header floats: every block to this rank starts with its slots' row
  // counts), then its rows for each of this rank's slots in turn. ep_chunk_first_ is where the rows of (s, slot j)
  // start in ep_received_; the outputs go back laid out as the rows came, without the headers (s's rows start
  // (s + 1) * my_header elements earlier there).
  const size_t received_chunks = size_t(ranks) * my_header;
  ep_chunk_first_.assign(received_chunks, 0);
  ep_chunk_rows_.assign(received_chunks, 0);
  ep_back_counts_.assign(size_t(ranks), 0);
  size_t received_rows = 0;
  for (size_t s = 0, at = 0; s < size_t(ranks); ++s) {
    const size_t block = ep_recv_counts_[s];
    size_t rows = 0;
    for (size_t j = 0; j < my_header && my_header <= block; ++j) {
      const float count = ep_received_[at + j];
      if (!(count >= 0.0f && count < 16777216.0f) || count != std::floor(count)) {
        rows = SIZE_MAX;
        break;
      }
      ep_chunk_rows_[s * my_header + j] = static_cast<size_t>(count);
      rows += static_cast<size_t>(count);
    }
    if (my_header > block || rows == SIZE_MAX || block != my_header + rows * width) {
      return make_error(Errc::internal, "expert parallel: rank " + std::to_string(s) + " sent a block of " +
                                            std::to_string(block) + " floats that its header does not describe");
    }
    for (size_t j = 0, pos = at + my_header; j < my_header; ++j) {
      ep_chunk_first_[s * my_header + j] = pos;
      pos += ep_chunk_rows_[s * my_header + j] * width;
    }
    ep_back_counts_[s] = rows * width;
    received_rows += rows;
    at += block;
  }
  ep_outputs_.resize(received_rows * width);
  // Each slot of this rank over the rows every rank sent it (host memory: create() refuses EP elsewhere).
  for (size_t j = 0; j < my_header; ++j) {
    size_t ne = 0;
    for (size_t s = 0; s < size_t(ranks); ++s) ne += ep_chunk_rows_[s * my_header + j];
    if (ne == 0) continue;
    be.reserve(xe_, ne * width);
    be.reserve(ye_, ne * width);
    for (size_t s = 0, row = 0; s < size_t(ranks); ++s) {
      const size_t c = ep_chunk_rows_[s * my_header + j];
      std::memcpy(xe_.data() + row * width, ep_received_.data() + ep_chunk_first_[s * my_header + j],
                  c * width * sizeof(float));
      row += c;
    }
    mlp(L.slots[j], xe_, ye_, static_cast<int>(ne));
    for (size_t s = 0, row = 0; s < size_t(ranks); ++s) {
      const size_t c = ep_chunk_rows_[s * my_header + j];
      std::memcpy(ep_outputs_.data() + ep_chunk_first_[s * my_header + j] - (s + 1) * my_header,
                  ye_.data() + row * width, c * width * sizeof(float));
      row += c;
    }
  }
  // Combine: the outputs go back to the ranks that sent the rows, in the order they came.
  ACTORD_TRY_STATUS(timed(context, [&] {
    return comm.all_to_all(std::span<const float>(ep_outputs_), ep_back_counts_, ep_returned_, ep_returned_counts_);
  }));
  for (size_t d = 0; d < size_t(ranks); ++d) {
    if (ep_returned_counts_[d] + header_to(int(d)) != ep_send_counts_[d])
      return make_error(Errc::internal, "expert parallel: rank " + std::to_string(d) +
                                            " returned other rows than it was sent");
  }
  if (sent == 0) return {};
  const std::optional<exec::Buffer> returned = be.host_view(ep_returned_);
  ACTORD_CHECK(returned.has_value());
  // Added in expert order (a token's experts ascending, as one rank adds them), whichever slots served them.
  ep_order_.resize(sent);
  for (size_t i = 0; i < sent; ++i) ep_order_[i] = static_cast<int32_t>(i);
  std::stable_sort(ep_order_.begin(), ep_order_.end(),
                   [&](int32_t a, int32_t b) { return ep_send_experts_[size_t(a)] < ep_send_experts_[size_t(b)]; });
  ep_sorted_rows_.resize(sent);
  ep_sorted_weights_.resize(sent);
  for (size_t i = 0; i < sent; ++i) {
    ep_sorted_rows_[i] = ep_send_rows_[size_t(ep_order_[i])];
    ep_sorted_weights_[i] = ep_send_weights_[size_t(ep_order_[i])];
  }
  be.reserve(ye_, sent * width);
  be.gather_rows(*returned, ep_order_, h, ye_);
  be.scatter_add_rows(ye_, ep_sorted_rows_, ep_sorted_weights_, h, tmp_);
  return {};
}

Status TransformerModel::mlp_over_ffn_ranks(const Layer& L, int n, const ForwardContext& context) {
  // Every token to every slice ("expert" f: FFN rank f's rows of the intermediate features) with weight 1: the sum
  // of the slices' outputs is the MLP's.
  routed_.resize(size_t(place_.afd_ffn));
  for (Routed& r : routed_) {
    r.rows.resize(size_t(n));
    for (int t = 0; t < n; ++t) r.rows[size_t(t)] = t;
    r.weights.assign(size_t(n), 1.0f);
  }
  backend_->zero(tmp_, size_t(n) * size_t(cfg_.hidden_size));
  return experts_over_ranks(L, n, context);
}

// Every MoE layer of this stage (with AFD every layer) serves its slots to the other lanes' tokens, for a lane
// with none (or fewer micro-batches than the busiest lane) and for an FFN rank.
Status TransformerModel::serve_experts(const ForwardContext& context) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!layers_[l].sparse && !place_.afd()) continue;
    // As many logical experts as the layer has (a dense layer under AFD: its slices), none routed here.
    routed_.resize(size_t(layers_[l].sparse ? spec_.num_experts : place_.afd_ffn));
    for (Routed& r : routed_) {
      r.rows.clear();
      r.weights.clear();
    }
    if (context.trace) context.trace->layer = shard_.layers.first + static_cast<int>(l);
    TraceScope span(context.trace, "experts", "compute");
    ACTORD_TRY_STATUS(experts_over_ranks(layers_[l], 0, context));
  }
  return {};
}

}  // namespace actord
