#include "core/topology_config.hpp"

#include "core/quantization.hpp"

#include "core/route_policy.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <charconv>
#include <climits>
#include <cstdint>
#include <fstream>
#include <set>
#include <span>
#include <sstream>

namespace actord {

const char* placement_name(Placement placement) {
  switch (placement) {
    case Placement::thread: return "thread";
    case Placement::process: return "process";
    case Placement::node: return "node";
  }
  return "?";
}
PhasePolicies phase_policies(const TopologyConfig& topology) {
  auto of = [&](bool (*serves)(ReplicaRole)) {
    for (const GroupSection& g : topology.groups)
      if (serves(g.role)) return *route_policy_from_name(g.router);
    return *route_policy_from_name(topology.groups.front().router);
  };
  return {of(serves_prefill), of(serves_decode)};
}

std::optional<AutoscaleCeiling> autoscale_ceiling(const TopologyConfig& topology) {
  AutoscaleCeiling out{topology, {}};
  for (size_t gi = 0; gi < topology.groups.size(); ++gi) {
    const AutoscaleSection& a = topology.groups[gi].autoscale;
    if (!a.active() || a.max_replicas <= topology.groups[gi].replicas) continue;
    out.topology.groups[gi].replicas = a.max_replicas;
    if (out.key.empty())
      out.key = "groups[" + std::to_string(gi) + "].autoscale.max_replicas: at " + std::to_string(a.max_replicas) +
                " replicas, ";
  }
  if (out.key.empty()) return std::nullopt;
  return out;
}

Error AutoscaleCeiling::refusal(const Error& inner) const {
  const std::string source = topology.source.string() + ": ";
  const bool named = inner.message.rfind(source, 0) == 0;  // the file named once
  return Error{inner.code, source + key + (named ? inner.message.substr(source.size()) : inner.message)};
}

namespace {

struct ConfigError {
  std::string path;
  std::string message;
};

// Reads one YAML mapping, refusing keys it does not know.
class Section {
 public:
  Section(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {}

  std::string child_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  void check_keys(const std::set<std::string>& known) const {
    if (!node_ || node_.IsNull()) return;
    if (!node_.IsMap()) throw ConfigError{path_, "must be a mapping"};
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (!known.count(key)) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        throw ConfigError{child_path(key), "unknown key (known keys: " + list + ")"};
      }
    }
  }

  YAML::Node get(const std::string& key) const {
    if (!node_ || node_.IsNull()) return YAML::Node();
    return node_[key];
  }

  template <class T>
  void read(const std::string& key, T& out) const {
    YAML::Node n = get(key);
    if (!n || n.IsNull()) return;
    if (!n.IsScalar()) throw ConfigError{child_path(key), "must be a scalar"};
    try {
      out = n.as<T>();
    } catch (const YAML::Exception&) {
      throw ConfigError{child_path(key), std::string("must be ") + type_name<T>() + ", got '" + n.Scalar() + "'"};
    }
  }

  // A byte size ("16MiB", "4GiB", a plain number of bytes) into `out`; left as it is when the key is absent.
  void read_bytes(const std::string& key, uint64_t& out) const {
    std::string text;
    read(key, text);
    if (text.empty()) return;
    auto bytes = parse_byte_size(text);
    if (!bytes.ok()) throw ConfigError{child_path(key), bytes.error().message};
    out = *bytes;
  }

  // A duration ("2s", "500ms") into `out`; left as it is when the key is absent.
  void read_duration(const std::string& key, std::chrono::milliseconds& out) const {
    std::string text;
    read(key, text);
    if (text.empty()) return;
    auto d = parse_duration(text);
    if (!d.ok()) throw ConfigError{child_path(key), d.error().message};
    out = *d;
  }

 private:
  template <class T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, int>) return "an integer";
    else if constexpr (std::is_same_v<T, bool>) return "true or false";
    else return "a string";
  }
  YAML::Node node_;
  std::string path_;
};

void require(bool ok, const std::string& path, const std::string& message) {
  if (!ok) throw ConfigError{path, message};
}

// groups[].role: a group that only prefills needs one that decodes, and one that only decodes one that prefills.
void check_roles(const std::vector<GroupSection>& groups) {
  auto any = [&](ReplicaRole a, ReplicaRole b) {
    return std::any_of(groups.begin(), groups.end(), [&](const GroupSection& g) { return g.role == a || g.role == b; });
  };
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string key = "groups[" + std::to_string(i) + "].role";
    if (groups[i].role == ReplicaRole::prefill)
      require(any(ReplicaRole::decode, ReplicaRole::both), key,
              "prefill hands every prefilled sequence to a group that decodes, and no group has role decode or both");
    if (groups[i].role == ReplicaRole::decode)
      require(any(ReplicaRole::prefill, ReplicaRole::both), key,
              "decode takes sequences prefilled elsewhere, and no group has role prefill or both");
  }
}

// groups[i].autoscale into group.autoscale; a group without `replicas` starts at min_replicas.
void parse_autoscale(const Section& g, const std::string& p, GroupSection& group) {
  const YAML::Node node = g.get("autoscale");
  if (!node || node.IsNull()) return;
  const std::string at = p + ".autoscale";
  const Section a(node, at);
  a.check_keys({"min_replicas", "max_replicas", "target_sequences", "target_prompt_tokens", "scale_up_after",
                "scale_down_after", "interval"});
  AutoscaleSection& s = group.autoscale;
  s.min_replicas = 1;
  a.read("min_replicas", s.min_replicas);
  a.read("max_replicas", s.max_replicas);
  a.read("target_sequences", s.target_sequences);
  a.read("target_prompt_tokens", s.target_prompt_tokens);
  a.read_duration("scale_up_after", s.scale_up_after);
  a.read_duration("scale_down_after", s.scale_down_after);
  a.read_duration("interval", s.interval);
  require(s.min_replicas >= 1, at + ".min_replicas", "must be at least 1, got " + std::to_string(s.min_replicas));
  require(a.get("max_replicas").IsDefined(), at + ".max_replicas",
          "must be set: the most replicas the group may grow to");
  require(s.max_replicas >= s.min_replicas, at + ".max_replicas",
          "must be at least min_replicas (" + std::to_string(s.min_replicas) + "), got " +
              std::to_string(s.max_replicas));
  require(s.max_replicas <= kMaxGroupDimension, at + ".max_replicas",
          "must be at most " + std::to_string(kMaxGroupDimension) + ", got " + std::to_string(s.max_replicas));
  require(s.target_sequences >= 0, at + ".target_sequences",
          "must be at least 1 (or 0: half of engine.max_num_seqs), got " + std::to_string(s.target_sequences));
  require(s.target_prompt_tokens >= 0, at + ".target_prompt_tokens",
          "must be at least 1 (or 0: the prefill backlog is not a signal), got " + std::to_string(s.target_prompt_tokens));
  require(s.interval.count() >= 10, at + ".interval",
          "must be at least 10ms, got " + std::to_string(s.interval.count()) + "ms");
  if (!g.get("replicas").IsDefined()) group.replicas = s.min_replicas;
  require(group.replicas >= s.min_replicas && group.replicas <= s.max_replicas, p + ".replicas",
          "must be within autoscale's min_replicas and max_replicas (" + std::to_string(s.min_replicas) + " to " +
              std::to_string(s.max_replicas) + "), got " + std::to_string(group.replicas));
}

// groups[].router: one policy per phase, so the groups whose requests share a phase name the same one.
void check_routers(const std::vector<GroupSection>& groups) {
  for (size_t i = 1; i < groups.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const ReplicaRole a = groups[i].role, b = groups[j].role;
      const char* phase = serves_prefill(a) && serves_prefill(b) ? "prefill"
                          : serves_decode(a) && serves_decode(b)   ? "decode"
                                                                   : nullptr;
      if (!phase || groups[i].router == groups[j].router) continue;
      require(false, "groups[" + std::to_string(i) + "].router",
              "must be groups[" + std::to_string(j) + "]'s (" + groups[j].router + "): both serve requests in their " +
                  phase + " phase, which the router routes by one policy, got '" + groups[i].router + "'");
    }
}

// Splits "groups[0].tp" or "groups.0.tp" into {"groups", "0", "tp"}.
std::vector<std::string> split_key_path(const std::string& key) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : key) {
    if (c == '.' || c == '[' || c == ']') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

bool is_index(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The index a path part of digits names; one too large for size_t names no element (SIZE_MAX).
size_t index_of(const std::string& digits) {
  size_t idx = 0;
  return std::from_chars(digits.data(), digits.data() + digits.size(), idx).ec == std::errc{} ? idx : SIZE_MAX;
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError{"--set " + assignment, "expected dotted.key=value"};
  }
  const std::string key = assignment.substr(0, eq);
  const auto parts = split_key_path(key);
  if (parts.empty()) throw ConfigError{"--set " + assignment, "expected dotted.key=value"};
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError{key, std::string("--set value is not valid YAML: ") + e.msg};
  }
  // yaml-cpp nodes are handles: walk down, creating maps as needed, then assign.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    YAML::Node next;
    if (is_index(parts[i])) {
      const size_t idx = index_of(parts[i]);
      if (!cur.IsSequence() || idx >= cur.size()) throw ConfigError{key, "--set: no element " + parts[i] + " here"};
      next = cur[idx];
    } else {
      if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap()) throw ConfigError{key, "--set: not a mapping"};
      next = cur[parts[i]];
    }
    chain.push_back(next);
  }
  YAML::Node parent = chain.back();
  const std::string& last = parts.back();
  if (is_index(last)) {
    const size_t idx = index_of(last);
    if (!parent.IsSequence() || idx >= parent.size()) throw ConfigError{key, "--set: no element " + last + " here"};
    parent[idx] = value;
  } else {
    parent[last] = value;
  }
}

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Bounds that keep a plan's rank list small enough to build and print.

constexpr uint64_t kMaxRanks = 65536;     // over all groups

bool is_simple_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-';
  });
}

// "tcp://HOST:PORT" (HOST a name, an IPv4 address or a bracketed IPv6 one), the form ZeroMQ connects to.
bool is_tcp_address(const std::string& a) {
  const std::string scheme = "tcp://";
  if (a.rfind(scheme, 0) != 0) return false;
  const std::string rest = a.substr(scheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.front() == '[' ? host.back() != ']' || host.size() < 3 : host.find_first_of("[]:/ ") != std::string::npos)
    return false;
  const auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), digit)) return false;
  const int number = std::stoi(port);
  return number >= 1 && number <= 65535;
}

std::vector<NodeSection> parse_nodes(const YAML::Node& nodes) {
  std::vector<NodeSection> out;
  if (!nodes || nodes.IsNull()) return out;
  require(nodes.IsSequence(), "nodes", "must be a list of {name, address}");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string p = "nodes[" + std::to_string(i) + "]";
    require(nodes[i].IsMap(), p, "must be a mapping");
    Section n(nodes[i], p);
    n.check_keys({"name", "address"});
    NodeSection node;
    n.read("name", node.name);
    n.read("address", node.address);
    require(!node.name.empty(), p + ".name", "is required");
    require(is_simple_name(node.name), p + ".name",
            "must be letters, digits, '_', '.' or '-', got '" + node.name + "'");
    require(node.name != kLocalNode, p + ".name", "'local' is this machine, always there: do not list it");
    require(!node.address.empty(), p + ".address", "is required");
    require(is_tcp_address(node.address), p + ".address", "must be tcp://HOST:PORT, got '" + node.address + "'");
    for (size_t j = 0; j < out.size(); ++j) {
      const std::string other = "nodes[" + std::to_string(j) + "]";
      require(out[j].name != node.name, p + ".name", "'" + node.name + "' is also the name of " + other);
      require(out[j].address != node.address, p + ".address", "'" + node.address + "' is also the address of " + other);
    }
    out.push_back(node);
  }
  return out;
}

// `placement`: thread | process | node:NAME | a list of node:NAME (the group's replica stages spread over them).
void parse_placement(const YAML::Node& value, const std::string& path, const std::vector<NodeSection>& nodes,
                     GroupSection& group) {
  if (!value || value.IsNull()) return;
  auto node_of = [&](const std::string& text, const std::string& at) {
    const std::string name = text.substr(5);
    bool known = name == kLocalNode;
    std::string list = kLocalNode;
    for (const auto& n : nodes) {
      known = known || n.name == name;
      list += ", " + n.name;
    }
    require(!name.empty(), at, "node: needs a node's name (node:local or one of nodes[])");
    require(known, at, "unknown node '" + name + "' (known nodes: " + list + ")");
    return name;
  };
  auto names_node = [](const YAML::Node& n) { return n.IsScalar() && n.Scalar().rfind("node:", 0) == 0; };
  if (value.IsScalar()) {
    const std::string text = value.Scalar();
    if (text == "thread") {
      group.placement = Placement::thread;
    } else if (text == "process") {
      group.placement = Placement::process;
    } else if (names_node(value)) {
      group.placement = Placement::node;
      group.placement_nodes = {node_of(text, path)};
    } else {
      throw ConfigError{path, "must be thread, process or node:<name>, got '" + text + "'"};
    }
    return;
  }
  require(value.IsSequence() && value.size() > 0, path,
          "must be thread, process, node:<name> or a non-empty list of node:<name>");
  group.placement = Placement::node;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    require(names_node(value[i]), at,
            "a list names nodes (node:<name>; node:local for a process on this machine), got '" +
                (value[i].IsScalar() ? value[i].Scalar() : std::string("a collection")) + "'");
    const std::string name = node_of(value[i].Scalar(), at);
    require(std::find(group.placement_nodes.begin(), group.placement_nodes.end(), name) ==
                group.placement_nodes.end(),
            at, "node '" + name + "' is listed twice");
    group.placement_nodes.push_back(name);
  }
}

// A placement list names no more nodes than the group has units to spread over them (an autoscaled group: at its
// max_replicas; fewer replicas, as it or actord scale may have, leave the last nodes without any).
void check_placement_spread(const GroupSection& placed, const std::string& path) {
  if (placed.placement != Placement::node) return;
  GroupSection group = placed;
  if (group.autoscale.active()) group.replicas = group.autoscale.max_replicas;
  const uint64_t units = uint64_t(group.units());
  require(group.placement_nodes.size() <= units, path,
          "lists " + std::to_string(group.placement_nodes.size()) + " nodes, but the group has only " +
              std::to_string(units) +
              (group.afd.active()      ? " replica lanes and FFN workers (replicas x (attention lanes + FFN workers))"
               : group.lanes() > 1     ? " replica lanes (replicas x ep/tp)"
                                       : " replica stages (replicas x pp)") +
              " to spread over them");
}

// groups[].afd: {attention: {workers: A, tp: T}, ffn: {workers: F, ep: F}}. Sets the group's tp to T; the group's
// own tp, pp and ep must be left at 1 (the pools say it all).
void parse_afd(const Section& g, const std::string& p, GroupSection& group) {
  const YAML::Node node = g.get("afd");
  if (!node || node.IsNull()) return;
  require(node.IsMap(), p + ".afd", "must be a mapping with attention and ffn");
  const Section afd(node, p + ".afd");
  afd.check_keys({"attention", "ffn"});
  require(group.tp == 1 && group.pp == 1 && group.ep == 1, p + ".afd",
          "sets the parallelism of its pools itself: leave " + p + ".tp, .pp and .ep at 1 (got tp " +
              std::to_string(group.tp) + ", pp " + std::to_string(group.pp) + ", ep " + std::to_string(group.ep) +
              "); use afd.attention.tp");
  const YAML::Node attention_node = afd.get("attention"), ffn_node = afd.get("ffn");
  require(attention_node && attention_node.IsMap(), p + ".afd.attention", "must be a mapping with workers (and tp)");
  require(ffn_node && ffn_node.IsMap(), p + ".afd.ffn", "must be a mapping with workers");
  const Section attention(attention_node, p + ".afd.attention");
  const Section ffn(ffn_node, p + ".afd.ffn");
  attention.check_keys({"workers", "tp"});
  ffn.check_keys({"workers", "ep"});
  int attention_workers = 0, tp = 1, ffn_workers = 0, ep = 0;
  attention.read("workers", attention_workers);
  attention.read("tp", tp);
  ffn.read("workers", ffn_workers);
  ffn.read("ep", ep);
  for (auto [key, value] : {std::pair<const char*, int>{"attention.workers", attention_workers},
                            {"attention.tp", tp}, {"ffn.workers", ffn_workers}}) {
    require(value >= 1 && value <= kMaxGroupDimension, p + ".afd." + key,
            "must be 1 to " + std::to_string(kMaxGroupDimension) + ", got " + std::to_string(value));
  }
  require(attention_workers % tp == 0, p + ".afd.attention.workers",
          "must be a multiple of afd.attention.tp (" + std::to_string(tp) + "): each attention lane is tp workers, got " +
              std::to_string(attention_workers));
  require(ep == 0 || ep == ffn_workers, p + ".afd.ffn.ep",
          "must equal afd.ffn.workers (" + std::to_string(ffn_workers) +
              "): the experts are sharded over every FFN worker, got " + std::to_string(ep));
  group.tp = tp;
  group.afd.attention_workers = attention_workers;
  group.afd.ffn_workers = ffn_workers;
}

TopologyConfig parse(const YAML::Node& root, const std::filesystem::path& source,
                     const TopologyOverrides& overrides) {
  TopologyConfig cfg;
  cfg.source = source;
  require(root.IsMap(), "", "the topology must be a YAML mapping");
  Section top(root, "");
  top.check_keys({"model", "server", "engine", "scheduler", "speculative", "lora", "nodes", "groups", "plugins"});
  if (const YAML::Node plugins = root["plugins"]; plugins && !plugins.IsNull()) {
    require(plugins.IsSequence(), "plugins", "must be a list of shared library paths");
    for (size_t i = 0; i < plugins.size(); ++i) {
      require(plugins[i].IsScalar() && !plugins[i].Scalar().empty(), "plugins[" + std::to_string(i) + "]",
              "must be a path");
      std::filesystem::path p = plugins[i].Scalar();
      if (p.is_relative()) p = source.parent_path() / p;
      cfg.plugins.push_back(p.lexically_normal());
    }
  }

  Section model(top.get("model"), "model");
  model.check_keys({"path", "dtype", "load_format", "seed", "quantization", "quantization_group",
                    "quantization_zero_points"});
  std::string model_path;
  model.read("path", model_path);
  if (overrides.model) {
    cfg.model.path = *overrides.model;
  } else {
    require(!model_path.empty(), "model.path", "is required");
    cfg.model.path = std::filesystem::path(model_path);
    if (cfg.model.path.is_relative()) cfg.model.path = source.parent_path() / cfg.model.path;
  }
  cfg.model.path = cfg.model.path.lexically_normal();
  model.read("dtype", cfg.model.dtype);
  require(cfg.model.dtype == "auto" || cfg.model.dtype == "float32" || cfg.model.dtype == "bfloat16" ||
              cfg.model.dtype == "float16",
          "model.dtype", "must be auto, float32, bfloat16 or float16, got '" + cfg.model.dtype + "'");
  model.read("load_format", cfg.model.load_format);
  require(cfg.model.load_format == "auto" || cfg.model.load_format == "dummy", "model.load_format",
          "must be auto or dummy, got '" + cfg.model.load_format + "'");
  int seed = 0;
  model.read("seed", seed);
  require(seed >= 0, "model.seed", "must be >= 0");
  cfg.model.seed = static_cast<uint64_t>(seed);
  model.read("quantization", cfg.model.quantization);
  model.read("quantization_group", cfg.model.quantization_group);
  model.read("quantization_zero_points", cfg.model.quantization_zero_points);
  const auto quant_kind = parse_quant_kind(cfg.model.quantization);
  require(quant_kind.ok(), "model.quantization", "must be none, int8 or int4, got '" + cfg.model.quantization + "'");
  const auto quant = make_quant_spec(*quant_kind, cfg.model.quantization_group, cfg.model.quantization_zero_points);
  require(quant.ok(), cfg.model.quantization_zero_points && *quant_kind != QuantKind::int4 ? "model.quantization_zero_points"
                                                                                           : "model.quantization_group",
          quant.ok() ? "" : quant.error().message);

  Section server(top.get("server"), "server");
  server.check_keys({"host", "port", "api_key", "max_request_body", "shutdown_timeout", "max_queued_requests",
                     "tool_call_parser", "reasoning_parser"});
  server.read("reasoning_parser", cfg.server.reasoning_parser);
  require(cfg.server.reasoning_parser == "auto" || cfg.server.reasoning_parser == "none", "server.reasoning_parser",
          "must be auto or none, got '" + cfg.server.reasoning_parser + "'");
  server.read("tool_call_parser", cfg.server.tool_call_parser);
  const std::string& parser = cfg.server.tool_call_parser;
  require(parser == "auto" || parser == "hermes" || parser == "mistral" || parser == "llama3_json",
          "server.tool_call_parser", "must be auto, hermes, mistral or llama3_json, got '" + parser + "'");
  server.read("host", cfg.server.host);
  server.read("port", cfg.server.port);
  require(cfg.server.port >= 0 && cfg.server.port < 65536, "server.port",
          "must be between 0 (any free port) and 65535, got " + std::to_string(cfg.server.port));
  server.read("api_key", cfg.server.api_key);
  server.read_bytes("max_request_body", cfg.server.max_request_body);
  require(cfg.server.max_request_body > 0, "server.max_request_body", "must be positive");
  server.read("max_queued_requests", cfg.server.max_queued_requests);
  require(cfg.server.max_queued_requests >= 1, "server.max_queued_requests",
          "must be at least 1, got " + std::to_string(cfg.server.max_queued_requests));
  server.read("shutdown_timeout", cfg.server.shutdown_timeout_s);
  require(cfg.server.shutdown_timeout_s >= 0, "server.shutdown_timeout",
          "must be 0 or more seconds, got " + std::to_string(cfg.server.shutdown_timeout_s));

  Section engine(top.get("engine"), "engine");
  engine.check_keys(
      {"max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_memory", "max_model_len", "kv_cache_dtype",
       "enable_prefix_caching", "preemption_mode", "swap_space", "step_timeout", "reshape_kv",
       "cpu_binding", "rebuild_retry_max"});
  engine.read("max_num_seqs", cfg.engine.max_num_seqs);
  require(cfg.engine.max_num_seqs >= 1, "engine.max_num_seqs",
          "must be at least 1, got " + std::to_string(cfg.engine.max_num_seqs));
  engine.read("max_num_batched_tokens", cfg.engine.max_num_batched_tokens);
  require(cfg.engine.max_num_batched_tokens >= 1, "engine.max_num_batched_tokens",
          "must be at least 1, got " + std::to_string(cfg.engine.max_num_batched_tokens));
  engine.read("block_size", cfg.engine.block_size);
  require(is_power_of_two(cfg.engine.block_size) && cfg.engine.block_size <= 256, "engine.block_size",
          "must be a power of two between 1 and 256, got " + std::to_string(cfg.engine.block_size));
  engine.read_bytes("kv_cache_memory", cfg.engine.kv_cache_memory);
  engine.read("kv_cache_dtype", cfg.engine.kv_cache_dtype);
  require(cfg.engine.kv_cache_dtype == "auto" || cfg.engine.kv_cache_dtype == "float32" ||
              cfg.engine.kv_cache_dtype == "bfloat16" || cfg.engine.kv_cache_dtype == "float16" ||
              cfg.engine.kv_cache_dtype == "int8",
          "engine.kv_cache_dtype", "must be auto, float32, bfloat16, float16 or int8, got '" + cfg.engine.kv_cache_dtype + "'");
  require(cfg.engine.kv_cache_memory > 0, "engine.kv_cache_memory", "must be positive");
  engine.read("max_model_len", cfg.engine.max_model_len);
  engine.read("enable_prefix_caching", cfg.engine.enable_prefix_caching);
  engine.read("preemption_mode", cfg.engine.preemption_mode);
  require(cfg.engine.preemption_mode == "recompute" || cfg.engine.preemption_mode == "swap", "engine.preemption_mode",
          "must be recompute or swap, got '" + cfg.engine.preemption_mode + "'");
  engine.read_bytes("swap_space", cfg.engine.swap_space);
  engine.read("reshape_kv", cfg.engine.reshape_kv);
  require(cfg.engine.reshape_kv == "move" || cfg.engine.reshape_kv == "recompute", "engine.reshape_kv",
          "must be move or recompute, got '" + cfg.engine.reshape_kv + "'");
  engine.read("cpu_binding", cfg.engine.cpu_binding);
  require(cfg.engine.cpu_binding == "auto" || cfg.engine.cpu_binding == "bind" || cfg.engine.cpu_binding == "none",
          "engine.cpu_binding", "must be auto, bind or none, got '" + cfg.engine.cpu_binding + "'");
  engine.read_duration("step_timeout", cfg.engine.step_timeout);
  require(cfg.engine.step_timeout.count() > 0, "engine.step_timeout", "must be positive");
  engine.read_duration("rebuild_retry_max", cfg.engine.rebuild_retry_max);
  require(cfg.engine.rebuild_retry_max.count() > 0, "engine.rebuild_retry_max", "must be positive");
  require(cfg.engine.max_model_len >= 0, "engine.max_model_len",
          "must be 0 (the model's context) or positive, got " + std::to_string(cfg.engine.max_model_len));

  Section scheduler(top.get("scheduler"), "scheduler");
  scheduler.check_keys({"policy", "plan_ahead"});
  scheduler.read("policy", cfg.scheduler.policy);
  scheduler.read("plan_ahead", cfg.scheduler.plan_ahead);
  // Which names exist is known only once plugins are loaded: Engine::start checks it against the policy registry.
  require(!cfg.scheduler.policy.empty(), "scheduler.policy", "must name a policy (fcfs, priority or a plugin's)");

  Section speculative(top.get("speculative"), "speculative");
  speculative.check_keys(
      {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "disable_by_batch_size"});
  SpeculativeSection& spec = cfg.speculative;
  speculative.read("method", spec.method);
  require(spec.method == "none" || spec.method == "ngram", "speculative.method",
          "must be none or ngram (prompt lookup; no draft model is supported yet), got '" + spec.method + "'");
  speculative.read("num_speculative_tokens", spec.num_speculative_tokens);
  require(spec.num_speculative_tokens >= 1 && spec.num_speculative_tokens <= 32, "speculative.num_speculative_tokens",
          "must be between 1 and 32, got " + std::to_string(spec.num_speculative_tokens));
  speculative.read("prompt_lookup_min", spec.prompt_lookup_min);
  speculative.read("prompt_lookup_max", spec.prompt_lookup_max);
  require(spec.prompt_lookup_min >= 1 && spec.prompt_lookup_min <= 16, "speculative.prompt_lookup_min",
          "must be between 1 and 16, got " + std::to_string(spec.prompt_lookup_min));
  require(spec.prompt_lookup_max >= spec.prompt_lookup_min && spec.prompt_lookup_max <= 16,
          "speculative.prompt_lookup_max",
          "must be between prompt_lookup_min (" + std::to_string(spec.prompt_lookup_min) + ") and 16, got " +
              std::to_string(spec.prompt_lookup_max));
  speculative.read("disable_by_batch_size", spec.disable_by_batch_size);
  require(spec.disable_by_batch_size >= 0, "speculative.disable_by_batch_size",
          "must be 0 (never) or a number of sequences, got " + std::to_string(spec.disable_by_batch_size));

  Section lora(top.get("lora"), "lora");
  lora.check_keys({"modules", "max_lora_rank"});
  lora.read("max_lora_rank", cfg.lora.max_lora_rank);
  require(cfg.lora.max_lora_rank >= 1 && cfg.lora.max_lora_rank <= 1024, "lora.max_lora_rank",
          "must be between 1 and 1024, got " + std::to_string(cfg.lora.max_lora_rank));
  if (const YAML::Node modules = lora.get("modules"); modules && !modules.IsNull()) {
    require(modules.IsMap(), "lora.modules", "must map adapter names to their folders (name: path)");
    for (const auto& kv : modules) {
      const std::string name = kv.first.as<std::string>();
      const std::string key = "lora.modules." + name;
      require(is_lora_name(name), key, "an adapter's name is letters, digits and _ . - / : (requests name it as their model)");
      require(kv.second.IsScalar() && !kv.second.Scalar().empty(), key, "must be the adapter's folder");
      std::filesystem::path path = kv.second.Scalar();
      if (path.is_relative()) path = source.parent_path() / path;
      cfg.lora.modules.push_back({name, path.lexically_normal()});
    }
  }

  cfg.nodes = parse_nodes(root["nodes"]);

  const YAML::Node groups = root["groups"];
  require(groups && groups.IsSequence() && groups.size() > 0, "groups", "must be a non-empty list of groups");
  uint64_t total_ranks = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string p = "groups[" + std::to_string(i) + "]";
    Section g(groups[i], p);
    require(groups[i].IsMap(), p, "must be a mapping");
    g.check_keys({"name", "replicas", "tp", "pp", "ep", "num_redundant_experts", "eplb_step_interval", "device", "link",
                  "tbo", "micro_batches", "afd", "placement", "threads", "cpu_isa", "oversubscribe", "router",
                  "role", "autoscale"});
    GroupSection group;
    g.read("name", group.name);
    require(is_simple_name(group.name), p + ".name",
            "must be letters, digits, '_', '.' or '-', got '" + group.name + "'");
    for (size_t j = 0; j < cfg.groups.size(); ++j) {
      require(cfg.groups[j].name != group.name, p + ".name",
              "'" + group.name + "' is also the name of groups[" + std::to_string(j) + "]");
    }
    using Dimension = std::pair<const char*, int*>;
    for (auto [key, value] : {Dimension{"replicas", &group.replicas}, Dimension{"tp", &group.tp},
                              Dimension{"pp", &group.pp}, Dimension{"ep", &group.ep}}) {
      g.read(key, *value);
      require(*value >= 1, p + "." + key, "must be at least 1, got " + std::to_string(*value));
      require(*value <= kMaxGroupDimension, p + "." + key,
              "must be at most " + std::to_string(kMaxGroupDimension) + ", got " + std::to_string(*value));
    }
    require(group.ep % group.tp == 0 || group.ep == 1, p + ".ep",
            "must be 1 or a multiple of tp (" + std::to_string(group.tp) +
                "): the experts are sharded over a stage's tp ranks, or over ep / tp attention data parallel lanes "
                "of tp ranks, got " + std::to_string(group.ep));
    require(group.lanes() == 1 || group.pp == 1, p + ".ep",
            "beyond tp (attention data parallel lanes) needs pp 1, got pp " + std::to_string(group.pp));
    parse_afd(g, p, group);
    g.read("num_redundant_experts", group.num_redundant_experts);
    g.read("eplb_step_interval", group.eplb_step_interval);
    require(group.num_redundant_experts >= 0 && group.num_redundant_experts <= 1024, p + ".num_redundant_experts",
            "must be 0 to 1024, got " + std::to_string(group.num_redundant_experts));
    require(group.eplb_step_interval >= 0, p + ".eplb_step_interval",
            "must be 0 (never) or a number of steps, got " + std::to_string(group.eplb_step_interval));
    require(group.ep > 1 || (group.num_redundant_experts == 0 && group.eplb_step_interval == 0),
            p + (group.num_redundant_experts > 0 ? ".num_redundant_experts" : ".eplb_step_interval"),
            group.afd.active() ? "is not built for an afd group's FFN pool yet (EPLB places experts over ep ranks)"
                               : "needs expert parallelism (ep > 1)");
    total_ranks += uint64_t(group.replicas) * uint64_t(group.ranks_per_replica());
    require(total_ranks <= kMaxRanks, p,
            "the groups so far have " + std::to_string(total_ranks) + " ranks (replicas x " +
                (group.afd.active() ? "(attention + FFN workers)" : group.lanes() > 1 ? "tp x pp x ep/tp lanes" : "tp x pp") +
                "), more than " +
                std::to_string(kMaxRanks));
    g.read("device", group.device);
    require(group.device == "cpu" || group.device == "cuda", p + ".device",
            "unknown device '" + group.device + "' (known: cpu, cuda)");
    g.read("threads", group.threads);
    require(group.threads >= 0 && group.threads <= 1024, p + ".threads",
            "must be 0 (auto) to 1024, got " + std::to_string(group.threads));
    g.read("oversubscribe", group.oversubscribe);
    if (YAML::Node tbo = g.get("tbo"); tbo && tbo.IsScalar() && tbo.Scalar() == "auto") {
      group.tbo = group.tbo_auto = true;
    } else {
      try {
        g.read("tbo", group.tbo);
      } catch (const ConfigError& e) {
        if (!tbo.IsScalar()) throw;
        throw ConfigError{e.path, "must be true, false or auto, got '" + tbo.Scalar() + "'"};
      }
    }
    if (g.get("micro_batches")) {
      g.read("micro_batches", group.micro_batches);
      require(group.micro_batches >= 2 && group.micro_batches <= GroupSection::kMaxMicroBatches, p + ".micro_batches",
              "must be 2 to " + std::to_string(GroupSection::kMaxMicroBatches) + ", got " +
                  std::to_string(group.micro_batches));
      require(group.tbo, p + ".micro_batches", "needs tbo: true (it says how many micro-batches two-batch overlap runs)");
    }
    require(!group.afd.active() || group.device == "cpu", p + ".afd",
            "attention-FFN disaggregation runs on CPU ranks only so far (device: " + group.device + ")");
    g.read("cpu_isa", group.cpu_isa);
    require(group.cpu_isa == "auto" || group.cpu_isa == "portable" || group.cpu_isa == "avx2" ||
                group.cpu_isa == "avx512" || group.cpu_isa == "avx512_bf16" || group.cpu_isa == "amx",
            p + ".cpu_isa", "must be auto, portable, avx2, avx512, avx512_bf16 or amx, got '" + group.cpu_isa + "'");
    g.read("router", group.router);
    if (auto policy = route_policy_from_name(group.router); !policy) require(false, p + ".router", policy.error().message);
    std::string role = replica_role_name(group.role);
    g.read("role", role);
    if (auto r = replica_role_from_name(role); !r) require(false, p + ".role", r.error().message);
    else group.role = *r;
    require(group.role == ReplicaRole::both || group.device == "cpu", p + ".role",
            "prefill/decode disaggregation runs on CPU ranks only so far (device: " + group.device + ")");
    parse_placement(g.get("placement"), p + ".placement", cfg.nodes, group);
    if (const YAML::Node link = g.get("link"); link && !link.IsNull()) {
      const Section l(link, p + ".link");
      l.check_keys({"latency", "bandwidth"});
      std::string latency, bandwidth;
      l.read("latency", latency);
      l.read("bandwidth", bandwidth);
      if (!latency.empty()) {
        auto d = parse_fine_duration(latency);
        require(d.ok(), p + ".link.latency", d ? "" : d.error().message);
        group.link.latency = *d;
      }
      if (!bandwidth.empty()) {
        auto rate = parse_byte_rate(bandwidth);
        require(rate.ok(), p + ".link.bandwidth", rate ? "" : rate.error().message);
        group.link.bytes_per_second = *rate;
      }
    }
    parse_autoscale(g, p, group);
    check_placement_spread(group, p + ".placement");
    cfg.groups.push_back(group);
  }
  check_roles(cfg.groups);
  check_routers(cfg.groups);
  return cfg;
}

}  // namespace

Result<uint64_t> parse_byte_size(const std::string& text) {
  auto bad = [&] { return make_error(Errc::invalid_config, "must be a size such as 256MiB or 1.5GiB, got '" + text + "'"); };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return bad();
  uint64_t whole = 0;
  if (std::from_chars(text.data(), text.data() + i, whole).ec != std::errc{}) {
    return make_error(Errc::invalid_config, "'" + text + "' is too large a size");
  }
  // An optional fraction: "1.5GiB".
  std::string fraction;
  if (i < text.size() && text[i] == '.') {
    size_t j = i + 1;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i + 1) return bad();
    fraction = text.substr(i + 1, std::min<size_t>(j - i - 1, 9));  // nanobyte precision is plenty
    i = j;
  }
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  static const std::pair<const char*, uint64_t> units[] = {
      {"", 1},           {"B", 1},           {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
      {"TiB", 1ull << 40}, {"KB", 1000},     {"MB", 1000000},     {"GB", 1000000000},  {"TB", 1000000000000},
      {"K", 1ull << 10}, {"M", 1ull << 20},  {"G", 1ull << 30},   {"T", 1ull << 40}};
  for (const auto& [name, mult] : units) {
    if (unit != name) continue;
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(whole, mult, &bytes)) {
      return make_error(Errc::invalid_config, "'" + text + "' is too large a size");
    }
    if (!fraction.empty()) {
      uint64_t scale = 1, digits = 0;
      for (char c : fraction) {
        scale *= 10;
        digits = digits * 10 + static_cast<uint64_t>(c - '0');
      }
      // mult * digits / scale without overflow: mult <= 2^40, digits < 10^9 < 2^30.
      const unsigned __int128 part = static_cast<unsigned __int128>(mult) * digits / scale;
      if (__builtin_add_overflow(bytes, static_cast<uint64_t>(part), &bytes)) {
        return make_error(Errc::invalid_config, "'" + text + "' is too large a size");
      }
    }
    return bytes;
  }
  return make_error(Errc::invalid_config, "unknown size unit '" + unit + "' in '" + text + "' (use KiB, MiB, GiB, TiB)");
}

// A duration's number and unit ("1.5", "ms"), or an Error saying what a duration looks like (`example`).
static Result<std::pair<double, std::string>> lex_duration(const std::string& text, const char* example) {
  auto bad = [&] { return make_error(Errc::invalid_config, std::string("must be a duration such as ") + example + ", got '" + text + "'"); };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0 || text.find('.') != text.rfind('.')) return bad();
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc{} || end != text.data() + i || !std::isfinite(value)) return bad();
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  return std::pair{value, unit};
}

// The lexed duration in the units of `units` (each: name, how many of the result's unit it is), rounded up; at most
// `limit`.
static Result<double> duration_in(const std::string& text, const std::pair<double, std::string>& lexed,
                                  std::span<const std::pair<const char*, double>> units, double limit,
                                  const char* unit_hint) {
  for (const auto& [name, per_unit] : units) {
    if (lexed.second != name) continue;
    const double v = std::ceil(lexed.first * per_unit);
    if (v > limit) return make_error(Errc::invalid_config, "'" + text + "' is too long a duration");
    return v;
  }
  return make_error(Errc::invalid_config,
                    "unknown duration unit '" + lexed.second + "' in '" + text + "' (use " + unit_hint + ")");
}

Result<std::chrono::nanoseconds> parse_fine_duration(const std::string& text) {
  auto lexed = lex_duration(text, "2s, 500ms or 200us");
  if (!lexed) return lexed.error();
  static const std::pair<const char*, double> units[] = {{"", 1e9}, {"s", 1e9}, {"ms", 1e6}, {"us", 1e3}, {"ns", 1},
                                                         {"m", 60e9}, {"h", 3600e9}};
  auto ns = duration_in(text, *lexed, units, 1e18, "us, ms, s");
  if (!ns) return ns.error();
  return std::chrono::nanoseconds(static_cast<int64_t>(*ns));
}

Result<uint64_t> parse_byte_rate(const std::string& text) {
  const std::string suffix = "/s";
  if (text.size() <= suffix.size() || text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0)
    return make_error(Errc::invalid_config, "must be a rate such as 10GB/s or 500MiB/s, got '" + text + "'");
  auto bytes = parse_byte_size(text.substr(0, text.size() - suffix.size()));
  if (!bytes) return make_error(Errc::invalid_config, "must be a rate such as 10GB/s or 500MiB/s, got '" + text + "'");
  if (*bytes == 0) return make_error(Errc::invalid_config, "must be a positive rate, got '" + text + "'");
  return *bytes;
}

Result<std::chrono::milliseconds> parse_duration(const std::string& text) {
  auto lexed = lex_duration(text, "2s or 500ms");
  if (!lexed) return lexed.error();
  static const std::pair<const char*, double> units[] = {{"", 1e3}, {"s", 1e3}, {"ms", 1}, {"us", 1e-3}, {"m", 60e3},
                                                         {"h", 3600e3}};
  auto ms = duration_in(text, *lexed, units, 1e12, "ms, s, m, h");
  if (!ms) return ms.error();
  return std::chrono::milliseconds(static_cast<int64_t>(*ms));
}

Result<TopologyConfig> parse_topology(const std::string& yaml_text, const std::filesystem::path& source,
                                      const TopologyOverrides& overrides) {
  const std::string where = source.string() + ": ";
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return make_error(Errc::invalid_config, where + "malformed YAML: " + e.what());
  }
  try {
    if (!root || root.IsNull()) return make_error(Errc::invalid_config, where + "the file is empty");
    for (const auto& assignment : overrides.set) apply_override(root, assignment);
    return parse(root, source, overrides);
  } catch (const ConfigError& e) {
    return make_error(Errc::invalid_config, where + (e.path.empty() ? "" : e.path + ": ") + e.message);
  } catch (const YAML::Exception& e) {
    return make_error(Errc::invalid_config, where + "invalid YAML: " + e.what());
  }
}

Result<TopologyConfig> load_topology(const std::filesystem::path& file, const TopologyOverrides& overrides) {
  std::ifstream in(file);
  if (!in) return make_error(Errc::not_found, file.string() + ": cannot read topology file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_topology(ss.str(), file, overrides);
}

}  // namespace actord
