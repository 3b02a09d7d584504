#include "sim/cost_profile.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace actord::sim {
namespace {

constexpr int kVersion = 1;

Error bad(const std::string& where, const std::string& what) {
  return Error{Errc::invalid_argument, where + ": " + what};
}

nlohmann::json shape_json(const ReplicaShape& s) {
  return {{"model", s.model}, {"device", s.device}, {"tp", s.tp},           {"pp", s.pp},
          {"ep", s.ep},       {"threads", s.threads}, {"placement", s.placement}, {"tbo", s.tbo}};
}

Result<ReplicaShape> shape_from(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "expected an object");
  ReplicaShape s;
  for (auto [key, out] : {std::pair{"model", &s.model}, {"device", &s.device}, {"placement", &s.placement}}) {
    const auto v = j.find(key);
    if (v == j.end() || !v->is_string()) return bad(where + "." + key, "expected a string");
    *out = v->get<std::string>();
  }
  for (auto [key, out] : {std::pair{"tp", &s.tp}, {"pp", &s.pp}, {"ep", &s.ep}, {"threads", &s.threads}}) {
    const auto v = j.find(key);
    if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 1 << 20)
      return bad(where + "." + key, "expected an integer of at least 1");
    *out = v->get<int>();
  }
  const auto tbo = j.find("tbo");
  if (tbo != j.end() && !tbo->is_boolean()) return bad(where + ".tbo", "expected true or false");
  s.tbo = tbo != j.end() && tbo->get<bool>();
  return s;
}

}  // namespace

std::string ReplicaShape::describe() const {
  return "tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + ", ep " + std::to_string(ep) + ", " +
         std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " per rank, " + placement + ", " +
         device + (tbo ? ", tbo" : "");
}

Result<const ReplicaCost*> CostProfile::find(const ReplicaShape& shape, const std::string& key) const {
  for (const ReplicaCost& r : replicas)
    if (r.shape == shape) return &r;
  std::string have;
  for (const ReplicaCost& r : replicas)
    have += "\n  " + r.shape.describe() + " of " + r.shape.model;
  return Error{Errc::invalid_argument, key + ": the cost profile has no replica of " + shape.describe() + " of " +
                                           shape.model + " (calibrate it: actord calibrate); it has:" +
                                           (have.empty() ? std::string(" none") : have)};
}

void CostProfile::put(ReplicaCost entry) {
  for (ReplicaCost& r : replicas)
    if (r.shape == entry.shape) {
      r = std::move(entry);
      return;
    }
  replicas.push_back(std::move(entry));
}

nlohmann::json CostProfile::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const ReplicaCost& r : replicas)
    list.push_back({{"shape", shape_json(r.shape)}, {"kv_blocks", r.kv_blocks}, {"cost", r.cost.to_json()}});
  nlohmann::json j = {{"version", kVersion}, {"cpu", cpu}, {"source", source}, {"replicas", list}};
  if (handoff)
    j["handoff"] = {{"fixed_us", handoff->fixed_us}, {"per_token_us", handoff->per_token_us},
                    {"samples", handoff->samples}};
  return j;
}

Result<CostProfile> CostProfile::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "expected a JSON object");
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != kVersion)
    return bad(where + ": version", "expected " + std::to_string(kVersion));
  CostProfile p;
  for (auto [key, out] : {std::pair{"cpu", &p.cpu}, {"source", &p.source}})  // words for people: any other type, none
    if (const auto v = j.find(key); v != j.end() && v->is_string()) *out = v->get<std::string>();
  const auto list = j.find("replicas");
  if (list == j.end() || !list->is_array()) return bad(where + ": replicas", "expected a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = where + ": replicas[" + std::to_string(i) + "]";
    const auto& e = (*list)[i];
    if (!e.is_object()) return bad(at, "expected an object");
    ReplicaCost r;
    auto shape = shape_from(e.value("shape", nlohmann::json()), at + ".shape");
    if (!shape) return shape.error();
    r.shape = *shape;
    const auto blocks = e.find("kv_blocks");
    if (blocks == e.end() || !blocks->is_number_integer() || blocks->get<int64_t>() < 1 ||
        blocks->get<int64_t>() > int64_t(UINT32_MAX))
      return bad(at + ".kv_blocks", "expected an integer of at least 1");
    r.kv_blocks = blocks->get<uint32_t>();
    auto cost = StepCostModel::from_json(e.value("cost", nlohmann::json()), at + ".cost");
    if (!cost) return cost.error();
    r.cost = *cost;
    p.replicas.push_back(std::move(r));
  }
  if (const auto h = j.find("handoff"); h != j.end()) {
    HandOffCost c;
    for (auto [key, out] : {std::pair{"fixed_us", &c.fixed_us}, {"per_token_us", &c.per_token_us}}) {
      const auto v = h->is_object() ? h->find(key) : h->end();
      if (!h->is_object() || v == h->end() || !v->is_number() || !(v->get<double>() >= 0))
        return bad(where + ": handoff." + key, "expected a number >= 0");
      *out = v->get<double>();
    }
    if (const auto n = h->find("samples"); n != h->end() && n->is_number_unsigned()) c.samples = n->get<size_t>();
    p.handoff = c;
  }
  return p;
}

Result<CostProfile> CostProfile::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return Error{Errc::invalid_argument, file.string() + ": cannot read the cost profile"};
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return bad(file.string(), "not JSON");
  return from_json(j, file.string());
}

Status CostProfile::save(const std::filesystem::path& file) const {
  std::ofstream out(file);
  if (!out) return Error{Errc::invalid_argument, file.string() + ": cannot write the cost profile"};
  out << to_json().dump(2) << "\n";
  if (!out) return Error{Errc::invalid_argument, file.string() + ": cannot write the cost profile"};
  return {};
}

}  // namespace actord::sim
