// Encode throughput of actord's tokenizer: a ~10 MB mixed corpus (the conformance corpus of
// tests/fixtures/tokenizers repeated: prose, code, CJK, Arabic, emoji, ...) cut into 1,000-character documents,
// encoded on one thread and through a pool of tokenizer actors. bench/tokenizer_bench_hf.js runs the HF tokenizers
// library on the same documents. Usage: actord_tokenizer_bench MODEL_DIR [actors]
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/actor_system_setup.hpp"
#include "actors/tokenizer_actor.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

std::vector<std::string> make_documents(size_t target_bytes) {
  std::ifstream in(std::string(ACTORD_SOURCE_DIR) + "/tests/fixtures/tokenizers/corpus.json");
  const auto corpus = nlohmann::json::parse(in).get<std::vector<std::string>>();
  // Whole corpus strings (valid UTF-8) joined by newlines into documents of about 1,000 bytes, round and round.
  std::vector<std::string> docs;
  std::string doc;
  size_t total = 0;
  for (size_t i = 0; total < target_bytes; i = (i + 1) % corpus.size()) {
    doc += corpus[i];
    doc += '\n';
    if (doc.size() >= 1000) {
      total += doc.size();
      docs.push_back(std::move(doc));
      doc.clear();
    }
  }
  return docs;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [actors]\n", argv[0]);
    return 2;
  }
  const int n_actors = argc > 2 ? std::atoi(argv[2]) : 2;
  auto tok = Tokenizer::load(argv[1]);
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.error().message.c_str());
    return 2;
  }
  const auto docs = make_documents(10u << 20);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  {
    // Save the documents for the HF side of the comparison.
    std::ofstream out("/tmp/actord_tokenizer_bench_docs.json");
    out << nlohmann::json(docs).dump();
  }
  size_t tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (const auto& d : docs) tokens += tok->encode(d).size();
  const double single_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto shared = std::make_shared<const Tokenizer>(std::move(*tok));
  ActordSystemConfig cfg(static_cast<size_t>(n_actors));
  caf::actor_system system(cfg);
  std::vector<tokenizer_actor> pool;
  for (int i = 0; i < n_actors; ++i) pool.push_back(spawn_tokenizer(system, shared));
  caf::scoped_actor self{system};
  t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < docs.size(); ++i) {
    self->send(pool[i % pool.size()], tokenize_atom::value,
               build<wire::TokenizeRequest>([&](wire::TokenizeRequest::Builder b) {
                 b.setCorrelationId(i);
                 b.setText(text_of(docs[i]));
               }));
  }
  size_t pool_tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    self->receive([&](const wire_msg& reply) {
      pool_tokens += WireReader(reply).root<wire::TokenizeResult>().getIds().size();
    });
  }
  const double pool_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& a : pool) self->send_exit(a, caf::exit_reason::user_shutdown);
  std::printf("{\"model\": \"%s\", \"bytes\": %zu, \"documents\": %zu, \"tokens\": %zu, "
              "\"single_thread_mb_per_s\": %.2f, \"actor_pool\": %d, \"pool_mb_per_s\": %.2f, \"pool_tokens\": %zu, \"pool_tokens_match\": %s}\n",
              argv[1], bytes, docs.size(), tokens, bytes / single_s / 1e6, n_actors, bytes / pool_s / 1e6, pool_tokens,
              pool_tokens == tokens ? "true" : "false");
  return 0;
}
