// actord check: validates a topology and its model folder and prints the resolved plan; starts nothing.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/actord/commands.hpp"
#include "core/host_cpus.hpp"
#include "core/host_memory.hpp"
#include "core/topology_plan.hpp"
#include "memory/memory_budget.hpp"
#include "plugins/model_checks.hpp"
#include "plugins/model_registry.hpp"
#include "scheduler/policy_registry.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord::cli {

Result<CheckedModel> check_model_folder(const TopologyConfig& topology) {
  ModelRegistry registry = ModelRegistry::with_builtins();
  PolicyRegistry policies = PolicyRegistry::with_builtins();
  auto m = actord::check_model(topology, registry, policies);
  if (!m) return m;
  auto tokenizer = Tokenizer::load(topology.model.path);
  if (!tokenizer) return tokenizer.error();
  return m;
}

namespace {

std::string range_text(const Range& r) {
  if (r.count == 0) return "-";
  if (r.count == 1) return std::to_string(r.first);
  return std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
}

std::string placement_text(const GroupSection& g) {
  if (g.placement != Placement::node) return placement_name(g.placement);
  std::string text;
  for (const auto& n : g.placement_nodes) text += (text.empty() ? "node:" : ", node:") + n;
  return text;
}


std::string threads_text(int threads) { return threads == 0 ? "auto" : std::to_string(threads); }

// Rows of cells, printed in columns two spaces apart; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows, const char* indent) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

void print_plan(const TopologyConfig& t, const CheckedModel& m, const TopologyPlan& plan,
                std::optional<uint64_t> available) {
  const ModelConfig& c = m.config;
  std::printf("%s: valid (nothing started)\n", t.source.string().c_str());
  std::printf("model    %s: %s, %d layers, %d heads, %d KV heads, hidden %d, intermediate %d, vocab %d\n",
              t.model.path.string().c_str(), c.architecture.c_str(), c.num_layers, c.num_heads, c.num_kv_heads,
              c.hidden_size, c.intermediate_size, c.vocab_size);
  std::printf("         weights %s (%s), KV %s per token (%s), max_model_len %d\n",
              format_bytes(m.estimated_weight_bytes).c_str(), m.weight_format.c_str(),
              format_bytes(c.kv_bytes_per_token(m.kv_dtype)).c_str(), dtype_config_name(m.kv_dtype), m.max_model_len);
  if (t.speculative.enabled()) {
    const SpeculativeSection& spec = t.speculative;
    std::printf("decoding speculative by prompt lookup: up to %d drafts from n-grams of %d-%d tokens%s\n",
                spec.num_speculative_tokens, spec.prompt_lookup_min, spec.prompt_lookup_max,
                spec.disable_by_batch_size > 0
                    ? (", below " + std::to_string(spec.disable_by_batch_size) + " running sequences").c_str()
                    : ", at any batch size");
  }
  for (const auto& adapter : m.lora)
    std::printf("lora     %s: %s (%s), requests name it as their model\n", adapter->name().c_str(),
                adapter->describe().c_str(), format_bytes(adapter->bytes()).c_str());
  std::printf("machine  %u cores, %s; ranks here: %d threads%s\n", plan.local_cores,
              available ? (format_bytes(*available) + " available").c_str() : "available memory unknown",
              plan.local_threads, plan.oversubscribed ? " (oversubscribed, as groups[].oversubscribe allows)" : "");
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    const GroupSection& section = t.groups[gi];
    const std::string experts =
        g.ffn_workers > 0 ? ", attention and FFN disaggregated: " + std::to_string(g.lanes * g.tp) +
                                " attention workers : " + std::to_string(g.ffn_workers) + " FFN workers"
        : g.ep <= 1       ? ""
        : g.lanes == 1 ? ", experts over ep " + std::to_string(g.ep) + " (the tp ranks)"
                       : ", experts over ep " + std::to_string(g.ep) + " (" + std::to_string(g.lanes) +
                             " attention data parallel lanes of tp " + std::to_string(g.tp) + ", each its own KV pool)";
    const std::string role =
        section.role == ReplicaRole::prefill  ? " (prefill: hands each prefilled sequence with its KV to a decode group)"
        : section.role == ReplicaRole::decode ? " (decode: takes the sequences prefilled elsewhere)"
                                              : "";
    std::printf("\ngroup %s%s: %d replica%s x %s%stp %d x pp %d%s = %zu rank%s%s, device %s, placement %s, "
                "routed by %s\n",
                g.name.c_str(), role.c_str(), g.replicas, g.replicas == 1 ? "" : "s", g.ffn_workers > 0 ? "(" : "",
                g.lanes > 1 ? (std::to_string(g.lanes) + " lanes x ").c_str() : "", g.tp, g.pp,
                g.ffn_workers > 0 ? (" + " + std::to_string(g.ffn_workers) + " FFN)").c_str() : "", g.ranks.size(),
                g.ranks.size() == 1 ? "" : "s", experts.c_str(),
                section.device.c_str(), placement_text(section).c_str(), section.router.c_str());
    std::printf("  KV per replica%s: %u blocks of %d tokens (%llu tokens)%s", g.lanes > 1 ? " lane" : "", g.num_kv_blocks, t.engine.block_size,
                static_cast<unsigned long long>(g.num_kv_blocks) * static_cast<unsigned long long>(t.engine.block_size),
                g.kv_replication > 1 ? (", each KV head on " + std::to_string(g.kv_replication) + " tp ranks").c_str()
                                     : "");
    if (g.num_swap_blocks > 0) std::printf(", swap %u blocks", g.num_swap_blocks);
    if (const AutoscaleSection& a = section.autoscale; a.active()) {
      const std::string target = a.target_sequences > 0 ? std::to_string(a.target_sequences)
                                                        : std::to_string(std::max(1, t.engine.max_num_seqs / 2));
      const std::string tokens =
          a.target_prompt_tokens > 0 ? " or " + std::to_string(a.target_prompt_tokens) + " prompt tokens to prefill" : "";
      std::printf("\n  autoscaled: %d to %d replicas, %s sequences%s each; up after %lld ms, down after %lld ms",
                  a.min_replicas, a.max_replicas, target.c_str(), tokens.c_str(), static_cast<long long>(a.scale_up_after.count()),
                  static_cast<long long>(a.scale_down_after.count()));
    }
    std::printf("\n\n");
    const bool moe = c.num_experts > 0;
    std::vector<std::vector<std::string>> rows{{"rank", "node", "process", "threads", "layers", "heads", "kv heads",
                                                "vocab", "weights", "KV/token", "KV pool", "memory"}};
    if (moe) rows[0].insert(rows[0].begin() + 8, "experts");
    for (const RankPlan& r : g.ranks) {
      rows.push_back({r.name, r.node, r.placement == Placement::thread ? "engine" : "own", threads_text(r.threads),
                      range_text(r.layers), range_text(r.heads), range_text(r.kv_heads), range_text(r.vocab),
                      format_bytes(r.weight_bytes), format_bytes(r.kv_bytes_per_token), format_bytes(r.kv_pool_bytes),
                      format_bytes(r.memory_bytes())});
      if (moe) {
        rows.back().insert(rows.back().begin() + 8, range_text(r.experts) + (r.redundant_experts > 0
                                                                               ? " +" + std::to_string(r.redundant_experts)
                                                                               : ""));
      }
    }
    print_table(rows, "  ");
  }
  std::printf("\n");
  std::vector<std::vector<std::string>> rows{
      {"node", "address", "ranks", "processes", "threads", "weights", "KV pool", "swap", "memory"}};
  for (const NodePlan& n : plan.nodes) {
    rows.push_back({n.name, n.address.empty() ? "(this machine)" : n.address, std::to_string(n.ranks),
                    std::to_string(n.processes), n.name == kLocalNode ? std::to_string(n.threads) : "-",
                    format_bytes(n.weight_bytes), format_bytes(n.kv_pool_bytes), format_bytes(n.swap_bytes),
                    format_bytes(n.weight_bytes + n.kv_pool_bytes + n.swap_bytes)});
  }
  print_table(rows, "");
}

nlohmann::json range_json(const Range& r) { return {{"first", r.first}, {"count", r.count}}; }

nlohmann::json plan_json(const TopologyConfig& t, const CheckedModel& m, const TopologyPlan& plan,
                         std::optional<uint64_t> available) {
  const ModelConfig& c = m.config;
  nlohmann::json j;
  j["config"] = t.source.string();
  j["valid"] = true;
  j["model"] = {{"path", t.model.path.string()},
                {"architecture", c.architecture},
                {"num_layers", c.num_layers},
                {"num_heads", c.num_heads},
                {"num_kv_heads", c.num_kv_heads},
                {"head_dim", c.head_dim},
                {"hidden_size", c.hidden_size},
                {"intermediate_size", c.intermediate_size},
                {"vocab_size", c.vocab_size},
                {"num_experts", c.num_experts},
                {"weight_dtype", dtype_config_name(m.weight_dtype)},
                {"weight_format", m.weight_format},
                {"kv_dtype", dtype_config_name(m.kv_dtype)},
                {"weight_bytes", m.estimated_weight_bytes},
                {"kv_bytes_per_token", c.kv_bytes_per_token(m.kv_dtype)},
                {"max_model_len", m.max_model_len}};
  j["machine"] = {{"cores", plan.local_cores},
                  {"available_memory", available ? nlohmann::json(*available) : nlohmann::json(nullptr)},
                  {"threads", plan.local_threads},
                  {"oversubscribed", plan.oversubscribed}};
  j["groups"] = nlohmann::json::array();
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    const GroupSection& section = t.groups[gi];
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankPlan& r : g.ranks) {
      ranks.push_back({{"name", r.name},
                       {"replica", r.replica},
                       {"tp_rank", r.tp_rank},
                       {"pp_rank", r.pp_rank},
                       {"node", r.node},
                       {"placement", placement_name(r.placement)},
                       {"own_process", r.placement != Placement::thread},
                       {"threads", r.threads},
                       {"layers", range_json(r.layers)},
                       {"heads", range_json(r.heads)},
                       {"kv_heads", range_json(r.kv_heads)},
                       {"vocab", range_json(r.vocab)},
                       {"experts", range_json(r.experts)},
                       {"redundant_experts", r.redundant_experts},
                       {"embedding", r.embedding},
                       {"lm_head", r.lm_head},
                       {"weight_params", r.weight_params},
                       {"weight_bytes", r.weight_bytes},
                       {"kv_bytes_per_token", r.kv_bytes_per_token},
                       {"kv_pool_bytes", r.kv_pool_bytes},
                       {"swap_bytes", r.swap_bytes},
                       {"memory_bytes", r.memory_bytes()}});
    }
    j["groups"].push_back({{"name", g.name},
                           {"replicas", g.replicas},
                           {"tp", g.tp},
                           {"ep", g.ep},
                           {"lanes", g.lanes},
                           {"ffn_workers", g.ffn_workers},
                           {"pp", g.pp},
                           {"device", section.device},
                           {"role", replica_role_name(section.role)},
                           {"router", section.router},
                           {"placement", placement_name(section.placement)},
                           {"placement_nodes", section.placement_nodes},
                           {"kv_replication", g.kv_replication},
                           {"block_size", t.engine.block_size},
                           {"num_kv_blocks", g.num_kv_blocks},
                           {"num_swap_blocks", g.num_swap_blocks},
                           {"ranks", ranks}});
  }
  j["nodes"] = nlohmann::json::array();
  for (const NodePlan& n : plan.nodes) {
    j["nodes"].push_back({{"name", n.name},
                          {"address", n.address},
                          {"ranks", n.ranks},
                          {"processes", n.processes},
                          {"threads", n.threads},
                          {"weight_bytes", n.weight_bytes},
                          {"kv_pool_bytes", n.kv_pool_bytes},
                          {"swap_bytes", n.swap_bytes}});
  }
  return j;
}

}  // namespace

CLI::App* add_check_command(CLI::App& app, CheckArgs& args) {
  auto* cmd = app.add_subcommand(
      "check", "Validate a topology and its model folder and print the resolved plan (ranks, nodes, layers, shards, "
               "memory per rank); starts nothing");
  add_common_options(cmd, args.common, "warn", false);
  cmd->add_flag("--json", args.json, "Print the plan as one JSON object");
  return cmd;
}

int run_check(const CheckArgs& args) {
  if (!apply_log_level(args.common.log_level)) return 2;
  auto topology = load_topology_of(args.common);
  if (!topology) return fail(topology.error());
  auto model = check_model_folder(*topology);
  if (!model) return fail(model.error());
  // The plan, and what its ranks on this machine hold against its available memory, as Engine::start checks them;
  // autoscaled groups at their max_replicas as well.
  const std::optional<uint64_t> available = available_host_memory();
  auto plan = plan_fitting(*topology, model_shape(*model), usable_cpu_cores(), available);
  if (!plan) return fail(plan.error());
  if (const auto ceiling = autoscale_ceiling(*topology))
    if (auto grown = plan_fitting(ceiling->topology, model_shape(*model), usable_cpu_cores(), available); !grown)
      return fail(ceiling->refusal(grown.error()));
  if (args.json) std::printf("%s\n", plan_json(*topology, *model, *plan, available).dump(2).c_str());
  else print_plan(*topology, *model, *plan, available);
  return 0;
}

}  // namespace actord::cli
