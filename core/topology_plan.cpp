#include "core/topology_plan.hpp"

#include <algorithm>
#include <cmath>

#include "core/kv_sizing.hpp"

namespace actord {
namespace {

// params x bytes per param, rounded up, saturating.
uint64_t bytes_of(uint64_t params, double bytes_per_param) {
  const double bytes = std::ceil(static_cast<double>(params) * bytes_per_param);
  return bytes >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(bytes);
}


// Part `index` of `total` split into `parts` as evenly as possible, earlier parts taking the extra.
Range split_evenly(int total, int parts, int index) {
  const int base = total / parts, extra = total % parts;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

std::string group_path(size_t i) { return "groups[" + std::to_string(i) + "]"; }

// The node unit `unit` of `group` runs on: replica stage replica * pp + stage, or with attention data parallel lanes
// (pp 1) replica lane replica * lanes + lane.
std::string node_of_unit(const GroupSection& group, int unit) {
  if (group.placement != Placement::node) return kLocalNode;
  const int units = group.units(), parts = static_cast<int>(group.placement_nodes.size());
  for (int p = 0; p < parts; ++p) {
    const Range r = split_evenly(units, parts, p);
    if (unit < r.first + r.count) return group.placement_nodes[static_cast<size_t>(p)];
  }
  return group.placement_nodes.back();
}

}  // namespace

std::vector<std::string> rank_nodes(const GroupSection& group) {
  std::vector<std::string> out;
  const int lanes = group.lanes();
  for (int r = 0; r < group.replicas; ++r) {
    for (int lane = 0; lane < lanes; ++lane)
      for (int s = 0; s < group.pp; ++s)
        for (int k = 0; k < group.tp; ++k) out.push_back(node_of_unit(group, group.unit_of(r, lane * group.pp + s)));
    for (int f = 0; f < group.afd.ffn_workers; ++f) out.push_back(node_of_unit(group, group.ffn_unit_of(r, f)));
  }
  return out;
}

std::vector<std::string> rank_agents(const TopologyConfig& topology, const GroupSection& group) {
  std::vector<std::string> out;
  for (const std::string& name : rank_nodes(group)) {
    std::string agent;
    for (const NodeSection& node : topology.nodes)
      if (node.name == name) agent = node.address;
    out.push_back(agent);
  }
  return out;
}

namespace {

// Ranks of `group` on this machine: tp per replica lane or stage, one per FFN worker.
int local_ranks(const GroupSection& group) {
  int ranks = 0;
  for (int r = 0; r < group.replicas; ++r) {
    for (int part = 0; part < group.pp * group.lanes(); ++part)
      ranks += node_of_unit(group, group.unit_of(r, part)) == kLocalNode ? group.tp : 0;
    for (int f = 0; f < group.afd.ffn_workers; ++f) ranks += node_of_unit(group, group.ffn_unit_of(r, f)) == kLocalNode;
  }
  return ranks;
}

// Ranks on this machine that compute at once: the pipeline stages of a replica take turns (a stage works when the
// one before has handed it its activations, and a decode step needs the previous step's tokens), so a replica with
// a stage here counts tp, however many of its stages are here. Attention data parallel lanes and FFN workers
// compute at once.
int local_slots(const GroupSection& group) {
  if (group.ep_group()) return local_ranks(group);
  int replicas = 0;
  for (int r = 0; r < group.replicas; ++r) {
    bool here = false;
    for (int s = 0; s < group.pp; ++s) here = here || node_of_unit(group, r * group.pp + s) == kLocalNode;
    replicas += here;
  }
  return replicas * group.tp;
}

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

Error config_error(const TopologyConfig& t, const std::string& path, const std::string& message) {
  return Error{Errc::invalid_config, t.source.string() + ": " + path + ": " + message};
}

// The rules of the model for group `i`, in the order a reader checks them.
Status check_model_rules(const TopologyConfig& t, size_t i, const ModelShape& m) {
  const GroupSection& g = t.groups[i];
  if (g.afd.active()) {
    if (std::string problem = ffn_pool_problem(m, g.afd.ffn_workers); !problem.empty())
      return config_error(t, group_path(i) + ".afd.ffn.workers", problem.substr(std::string("afd.ffn.workers ").size()));
    if (std::string problem = parallelism_problem(m, g.tp, 1, 1); !problem.empty())
      return config_error(t, group_path(i) + ".afd.attention.tp", problem.substr(3));
    return {};
  }
  const std::string problem = parallelism_problem(m, g.tp, g.pp, g.ep);
  if (problem.empty()) return {};
  return config_error(t, group_path(i) + "." + problem.substr(0, 2), problem.substr(3));
}

Status check_shape(const ModelShape& m) {
  const std::pair<const char*, int> counts[] = {
      {"num_layers", m.num_layers},   {"num_heads", m.num_heads},
      {"num_kv_heads", m.num_kv_heads}, {"head_dim", m.head_dim},
      {"hidden_size", m.hidden_size}, {"intermediate_size", m.intermediate_size},
      {"vocab_size", m.vocab_size}};
  for (const auto& [name, value] : counts) {
    if (value <= 0)
      return make_error(Errc::invalid_argument, std::string("model shape: ") + name + " must be positive, got " +
                                                    std::to_string(value));
  }
  if (m.num_experts < 0 || !(m.weight_bytes_per_param > 0) || m.kv_bytes_per_token == 0 ||
      m.kv_bytes_per_token % (uint64_t(m.num_layers) * uint64_t(m.num_kv_heads)) != 0)
    return make_error(Errc::invalid_argument,
                      "model shape: num_experts, weight_bytes_per_param or kv_bytes_per_token is inconsistent");
  return {};
}

// Weight elements rank (heads, kv_heads, stage layers, vocab rows) holds; tp splits the MLP's intermediate rows.
uint64_t rank_params(const ModelShape& m, const RankPlan& r, int tp, int pp, int ep, int ffn_workers = 0) {
  const uint64_t hidden = uint64_t(m.hidden_size), head_dim = uint64_t(m.head_dim);
  const uint64_t expert_width = uint64_t(m.moe_intermediate_size > 0 ? m.moe_intermediate_size : m.intermediate_size);
  if (r.ffn_rank >= 0) {  // AFD's FFN worker: every layer's MLP slice or experts
    const uint64_t sparse = uint64_t(r.experts.count) * 3 * hidden * expert_width;
    const uint64_t dense = 3 * hidden * uint64_t(r.ffn_intermediate.count);
    return uint64_t(r.layers.count) * std::max(sparse, dense);
  }
  const uint64_t q = uint64_t(r.heads.count) * head_dim, kv = uint64_t(r.kv_heads.count) * head_dim;
  const uint64_t ff = uint64_t(m.intermediate_size / tp),
                 experts = uint64_t(std::max(1, r.experts.count + r.redundant_experts));
  const int expert_split = ep > 1 ? 1 : tp;  // whole experts under EP
  const uint64_t expert_ff = uint64_t((m.moe_intermediate_size > 0 ? m.moe_intermediate_size : m.intermediate_size) /
                                      expert_split);
  const uint64_t attention = 2 * hidden * q + 2 * hidden * kv + (m.attention_bias ? q + 2 * kv : 0);
  // A layer holds its experts, or (Qwen3-MoE's dense layers) a dense MLP: the larger of the two, per layer.
  const uint64_t shared =
      m.shared_expert_intermediate_size > 0 ? uint64_t(m.shared_expert_intermediate_size / tp) * 3 * hidden + hidden : 0;
  const uint64_t sparse =
      m.num_experts > 0 ? experts * 3 * hidden * expert_ff + uint64_t(m.num_experts) * hidden + shared : 0;
  // AFD's attention ranks keep the routers and the shared expert, not the MLPs and experts.
  const uint64_t mlp = ffn_workers > 0 ? (m.num_experts > 0 ? uint64_t(m.num_experts) * hidden + shared : 0)
                                       : std::max(sparse, 3 * hidden * ff);
  const uint64_t layer = attention + mlp + 2 * hidden;  // + input and post-attention norms
  uint64_t params = uint64_t(r.layers.count) * layer;
  const uint64_t vocab_rows = uint64_t(r.vocab.count) * hidden;
  if (r.embedding) params += vocab_rows;
  // The last stage's lm_head: its own rows, or the tied embedding's, which the first stage holds only when pp == 1.
  if (r.lm_head) params += hidden + ((!m.tie_word_embeddings || pp > 1) ? vocab_rows : 0);
  return params;
}

}  // namespace

std::string ffn_pool_problem(const ModelShape& m, int ffn_workers) {
  const std::string got = ", got " + std::to_string(ffn_workers);
  if (ffn_workers < 1) return "afd.ffn.workers must be at least 1" + got;
  if (m.num_experts > 0 && m.num_experts % ffn_workers != 0)
    return "afd.ffn.workers must divide the number of experts (" + std::to_string(m.num_experts) +
           "): each FFN worker holds whole experts" + got;
  if (m.intermediate_size % ffn_workers != 0)
    return "afd.ffn.workers must divide intermediate_size (" + std::to_string(m.intermediate_size) +
           "): the dense MLPs are split over the FFN workers" + got;
  return {};
}

std::string parallelism_problem(const ModelShape& m, int tp, int pp, int ep) {
  const std::string got = ", got ";
  if (tp < 1) return "tp must be at least 1" + got + std::to_string(tp);
  if (pp < 1) return "pp must be at least 1" + got + std::to_string(pp);
  if (ep < 1 || (ep != 1 && ep % tp != 0))
    return "ep must be 1 or a multiple of tp (" + std::to_string(tp) +
           "): the experts are sharded over a stage's tp ranks, or over ep / tp attention data parallel lanes of tp "
           "ranks" + got + std::to_string(ep);
  if (ep > tp && pp > 1)
    return "ep beyond tp (attention data parallel lanes) needs pp 1" + got + "pp " + std::to_string(pp);
  if (ep > 1 && m.num_experts == 0)
    return "ep needs a mixture-of-experts model (num_local_experts or num_experts in config.json); this one is dense" +
           got + std::to_string(ep);
  if (ep > 1 && m.num_experts % ep != 0)
    return "ep must divide the number of experts (" + std::to_string(m.num_experts) + ")" + got + std::to_string(ep);
  if (m.num_heads % tp != 0)
    return "tp must divide num_attention_heads (" + std::to_string(m.num_heads) + ")" + got + std::to_string(tp);
  if (m.num_kv_heads % tp != 0 && tp % m.num_kv_heads != 0)
    return "tp must divide num_key_value_heads (" + std::to_string(m.num_kv_heads) +
           ") or be a multiple of it (each KV head is then replicated)" + got + std::to_string(tp);
  if (m.intermediate_size % tp != 0)
    return "tp must divide intermediate_size (" + std::to_string(m.intermediate_size) + ")" + got +
           std::to_string(tp);
  if (ep == 1 && m.moe_intermediate_size > 0 && m.moe_intermediate_size % tp != 0)
    return "tp must divide moe_intermediate_size (" + std::to_string(m.moe_intermediate_size) + ")" + got +
           std::to_string(tp);
  if (m.shared_expert_intermediate_size % tp != 0)
    return "tp must divide shared_expert_intermediate_size (" + std::to_string(m.shared_expert_intermediate_size) +
           ")" + got + std::to_string(tp);
  if (tp > m.vocab_size) return "tp must be at most vocab_size (" + std::to_string(m.vocab_size) + ")" + got + std::to_string(tp);
  if (pp > m.num_layers)
    return "pp must be at most num_hidden_layers (" + std::to_string(m.num_layers) + ")" + got + std::to_string(pp);
  return {};
}

RankShard shard_of_rank(const ModelShape& m, int tp, int pp, int k, int s, int ep, int lane) {
  RankShard shard;
  shard.layers = split_evenly(m.num_layers, pp, s);
  shard.heads = {k * (m.num_heads / tp), m.num_heads / tp};
  const int kv_replication = tp > m.num_kv_heads ? tp / m.num_kv_heads : 1;
  shard.kv_heads = tp > m.num_kv_heads ? Range{k / kv_replication, 1}
                                       : Range{k * (m.num_kv_heads / tp), m.num_kv_heads / tp};
  shard.intermediate = {k * (m.intermediate_size / tp), m.intermediate_size / tp};
  const int expert_ff = m.moe_intermediate_size > 0 ? m.moe_intermediate_size : m.intermediate_size;
  shard.expert_intermediate = ep > 1 ? Range{0, expert_ff} : Range{k * (expert_ff / tp), expert_ff / tp};
  shard.experts = ep > 1 ? Range{(lane * tp + k) * (m.num_experts / ep), m.num_experts / ep} : Range{0, m.num_experts};
  const int shared_ff = m.shared_expert_intermediate_size;
  shard.shared_intermediate = {k * (shared_ff / tp), shared_ff / tp};
  shard.embedding = s == 0;
  shard.lm_head = s == pp - 1;
  if (shard.embedding || shard.lm_head) shard.vocab = split_evenly(m.vocab_size, tp, k);
  return shard;
}

Status check_threads_fit(const TopologyConfig& t, unsigned local_cores) {
  uint64_t demand = 0;
  for (const auto& g : t.groups) demand += uint64_t(local_slots(g)) * uint64_t(std::max(1, g.threads));
  if (demand <= local_cores) return {};
  for (size_t i = 0; i < t.groups.size(); ++i) {
    const GroupSection& g = t.groups[i];
    const int slots = local_slots(g);
    if (slots == 0 || g.oversubscribe) continue;
    const uint64_t own = uint64_t(slots) * uint64_t(std::max(1, g.threads));
    const std::string others = demand == own ? "" : " (" + std::to_string(demand) + " with the other groups' ranks)";
    return config_error(
        t, group_path(i) + ".threads",
        plural(slots, "rank") + " at once x " + plural(std::max(1, g.threads), "thread") + " on this machine need " +
            std::to_string(own) + " cores" + others + ", it has " + std::to_string(local_cores) +
            "; lower threads, tp, pp or replicas, place ranks on other nodes, or set " + group_path(i) +
            ".oversubscribe: true");
  }
  return {};
}

Result<TopologyPlan> plan_topology(const TopologyConfig& t, const ModelShape& m, unsigned local_cores) {
  ACTORD_TRY_STATUS(check_shape(m));
  for (size_t i = 0; i < t.groups.size(); ++i) ACTORD_TRY_STATUS(check_model_rules(t, i, m));
  ACTORD_TRY_STATUS(check_threads_fit(t, local_cores));

  TopologyPlan plan;
  plan.local_cores = local_cores;
  {
    RankPlan whole;
    whole.layers = {0, m.num_layers};
    whole.heads = {0, m.num_heads};
    whole.kv_heads = {0, m.num_kv_heads};
    whole.vocab = {0, m.vocab_size};
    whole.embedding = whole.lm_head = true;
    whole.experts = {0, m.num_experts};
    plan.model_weight_bytes = bytes_of(rank_params(m, whole, 1, 1, 1), m.weight_bytes_per_param);
  }

  // Threads on this machine: explicit ones as asked; the cores left are split as evenly as possible among the
  // ranks with threads 0 that compute at once (one each at least): every stage of a replica here gets the share of
  // its (replica, tp rank), since the stages take turns (local_slots).
  uint64_t explicit_threads = 0;
  int auto_slots = 0;
  for (const auto& g : t.groups) {
    if (g.threads > 0) explicit_threads += uint64_t(local_slots(g)) * uint64_t(g.threads);
    else auto_slots += local_slots(g);
  }
  const int cores_left = explicit_threads >= local_cores ? 0 : static_cast<int>(local_cores - explicit_threads);
  int auto_index = 0;  // slots of the groups before
  auto auto_share = [&](int slot) {
    return auto_slots == 0 ? 1 : std::max(1, split_evenly(cores_left, auto_slots, auto_index + slot).count);
  };

  const uint64_t kv_per_layer_head = m.kv_bytes_per_token / (uint64_t(m.num_layers) * uint64_t(m.num_kv_heads));
  const std::string where = t.source.string() + ": ";
  for (size_t gi = 0; gi < t.groups.size(); ++gi) {
    const GroupSection& g = t.groups[gi];
    GroupPlan gp;
    gp.name = g.name;
    gp.replicas = g.replicas;
    gp.tp = g.tp;
    gp.pp = g.pp;
    gp.ep = g.ep;
    gp.lanes = g.lanes();
    gp.ffn_workers = g.afd.ffn_workers;
    gp.kv_replication = g.tp > m.num_kv_heads ? g.tp / m.num_kv_heads : 1;
    uint64_t largest_per_token = 0;
    const int lanes = g.lanes();
    const std::vector<std::string> nodes = rank_nodes(g);  // of each rank, in the order they are pushed below
    for (int u = 0; u < g.replicas * lanes; ++u) {  // replica lanes: one per replica without attention lanes
      const int r = u / lanes, lane = u % lanes;
      for (int s = 0; s < g.pp; ++s) {
        for (int k = 0; k < g.tp; ++k) {
          RankPlan rank;
          rank.name = g.name + "/replica/" + std::to_string(r) + "/worker/" +
                      (lanes > 1 ? "dp" + std::to_string(lane) + "." : std::string()) + "tp" + std::to_string(k) +
                      ".pp" + std::to_string(s);
          rank.replica = r;
          rank.lane = lane;
          rank.tp_rank = k;
          rank.pp_rank = s;
          rank.placement = g.placement;
          rank.node = nodes.at(gp.ranks.size());
          rank.threads = rank.node != kLocalNode ? g.threads : g.threads > 0 ? g.threads : auto_share(r * (lanes * g.tp + g.afd.ffn_workers) + lane * g.tp + k);
          const RankShard shard = shard_of_rank(m, g.tp, g.pp, k, s, g.ep, lane);
          const bool afd = g.afd.active();
          rank.layers = shard.layers;
          rank.heads = shard.heads;
          rank.kv_heads = shard.kv_heads;
          rank.vocab = shard.vocab;
          rank.experts = afd ? Range{} : shard.experts;
          rank.redundant_experts = g.ep > 1 && m.num_experts > 0 ? g.num_redundant_experts : 0;
          rank.embedding = shard.embedding;
          rank.lm_head = shard.lm_head;
          rank.weight_params = rank_params(m, rank, g.tp, g.pp, g.ep, g.afd.ffn_workers);
          rank.weight_bytes = bytes_of(rank.weight_params, m.weight_bytes_per_param);
          rank.kv_bytes_per_token = kv_per_layer_head * uint64_t(rank.layers.count) * uint64_t(rank.kv_heads.count);
          largest_per_token = std::max(largest_per_token, rank.kv_bytes_per_token);
          gp.ranks.push_back(std::move(rank));
        }
      }
      if (lane + 1 < lanes) continue;
      for (int f = 0; f < g.afd.ffn_workers; ++f) {  // the replica's FFN pool after its lanes
        RankPlan rank;
        rank.name = g.name + "/replica/" + std::to_string(r) + "/ffn/" + std::to_string(f);
        rank.replica = r;
        rank.ffn_rank = f;
        rank.placement = g.placement;
        rank.node = nodes.at(gp.ranks.size());
        rank.threads = rank.node != kLocalNode ? g.threads : g.threads > 0 ? g.threads : auto_share(r * (lanes * g.tp + g.afd.ffn_workers) + lanes * g.tp + f);
        rank.layers = {0, m.num_layers};
        rank.experts = m.num_experts > 0 ? split_evenly(m.num_experts, g.afd.ffn_workers, f) : Range{};
        rank.ffn_intermediate = split_evenly(m.intermediate_size, g.afd.ffn_workers, f);
        rank.weight_params = rank_params(m, rank, 1, 1, 1);
        rank.weight_bytes = bytes_of(rank.weight_params, m.weight_bytes_per_param);
        gp.ranks.push_back(std::move(rank));
      }
    }
    // A replica's ranks all hold the same blocks (one block table per sequence): its largest rank decides how many.
    auto sizing = size_kv_cache(t.engine, largest_per_token, where);
    if (!sizing) return sizing.error();
    gp.num_kv_blocks = sizing->num_blocks;
    gp.num_swap_blocks = sizing->swap_blocks;
    for (auto& rank : gp.ranks) {
      const uint64_t block = rank.kv_bytes_per_token * uint64_t(t.engine.block_size);
      rank.kv_pool_bytes = block * gp.num_kv_blocks;
      rank.swap_bytes = block * gp.num_swap_blocks;
    }
    if (g.threads == 0) auto_index += local_slots(g);
    plan.groups.push_back(std::move(gp));
  }

  plan.nodes.push_back(NodePlan{kLocalNode, ""});
  for (const auto& n : t.nodes) plan.nodes.push_back(NodePlan{n.name, n.address});
  for (const auto& gp : plan.groups) {
    for (const auto& rank : gp.ranks) {
      auto node = std::find_if(plan.nodes.begin(), plan.nodes.end(),
                               [&](const NodePlan& n) { return n.name == rank.node; });
      ACTORD_CHECK_MSG(node != plan.nodes.end(), "a rank on a node the topology does not list");
      node->ranks += 1;
      node->processes += rank.placement != Placement::thread;
      // Threads at once: a (replica, tp rank) counts its first stage on this node only (the stages take turns).
      const bool first_here = std::none_of(gp.ranks.begin(), gp.ranks.end(), [&](const RankPlan& o) {
        return o.replica == rank.replica && o.lane == rank.lane && o.tp_rank == rank.tp_rank && o.node == rank.node &&
               o.pp_rank < rank.pp_rank;
      });
      if (first_here) node->threads += rank.threads;
      node->weight_bytes += rank.weight_bytes;
      node->kv_pool_bytes += rank.kv_pool_bytes;
      node->swap_bytes += rank.swap_bytes;
    }
  }
  plan.local_threads = plan.nodes.front().threads;
  plan.oversubscribed = static_cast<unsigned>(plan.local_threads) > local_cores;
  return plan;
}

}  // namespace actord
