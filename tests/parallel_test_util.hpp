// What the parallel engine tests share: a batch of greedy requests (one with a repetition penalty, one with
// logprobs), running it through an engine, random-weight topologies and MoE folders, comparing outputs token for
// token, and killing a worker process by its rank's name.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "process_util.hpp"

namespace actord::test {

inline std::vector<GenerateRequest> batch(bool text_prompts) {
  const std::vector<std::string> texts = {"Once upon a time", "The little dog", "Lily and Tom went to the park",
                                          "One day", "A big red ball", "The sun was hot and"};
  std::vector<GenerateRequest> requests;
  for (size_t i = 0; i < texts.size(); ++i) {
    GenerateRequest r;
    if (text_prompts) {
      r.prompt = texts[i];
    } else {  // ids of a model without a tokenizer of its own vocabulary
      r.prompt_ids = {1};
      for (size_t j = 0; j <= i * 3; ++j) r.prompt_ids.push_back(static_cast<int32_t>((j * 37 + i * 11) % 500 + 3));
    }
    r.max_tokens = 64;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    if (i == 1) r.sampling.repetition_penalty = 1.3f;
    if (i == 2) r.sampling.logprobs = 3;
    requests.push_back(std::move(r));
  }
  return requests;
}

inline std::vector<GenerateOutput> run(const TopologyConfig& cfg, const std::vector<GenerateRequest>& requests) {
  auto engine = start_engine(cfg);
  auto out = engine->generate(requests);
  if (!out) FAIL(out.error().message);
  return std::move(*out);
}

// `file` with --set overrides, serving the random-weight model of folder `dir` (load_format dummy, seed 5).
inline TopologyConfig dummy_topology(const std::filesystem::path& dir, const std::string& file, std::vector<std::string> set) {
  set.push_back("model.path=" + dir.string());
  set.push_back("model.load_format=dummy");
  set.push_back("model.seed=5");
  return quickstart(file, set);
}

inline void check_same(const std::vector<GenerateOutput>& expected, const std::vector<GenerateOutput>& got) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i);
    REQUIRE_FALSE(got[i].error.has_value());
    CHECK(got[i].generated_ids.size() == 64);
    CHECK(got[i].generated_ids == expected[i].generated_ids);
    REQUIRE(got[i].logprobs.size() == expected[i].logprobs.size());
    for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
      CHECK(got[i].logprobs[t].top_ids == expected[i].logprobs[t].top_ids);
      CHECK(got[i].logprobs[t].logprob == Approx(expected[i].logprobs[t].logprob).margin(1e-4));
    }
  }
}

// A stream callback that SIGKILLs the worker process of rank `name` the first time it is called.
inline auto kill_rank_once(const std::string& name, bool& killed, pid_t& victim) {
  return [&killed, &victim, name](size_t, std::string_view) {
    if (killed) return;
    for (pid_t pid : worker_processes_of(getpid())) {
      const auto args = process_args("/proc/" + std::to_string(pid));
      if (std::find(args.begin(), args.end(), name) != args.end()) {
        victim = pid;
        killed = kill(pid, SIGKILL) == 0;
      }
    }
  };
}


// A random-weight MoE folder (load_format dummy) with the stories260K tokenizer's 512 ids.
// Runs `requests` on `engine` cleanly, then again while rank `rank`'s worker process is SIGKILLed once the first
// text arrives: every request completes with the clean run's tokens, the replica is rebuilt (incarnation 1) with
// `workers` processes again (the victim not among them), and stopping the engine leaves no worker process.
inline void check_rank_kill_recovers(std::unique_ptr<Engine>& engine, const std::vector<GenerateRequest>& requests,
                                     const std::string& rank, size_t workers) {
  REQUIRE(worker_processes_of(getpid()).size() == workers);
  auto clean = engine->generate(requests);
  REQUIRE(clean.ok());
  for (const GenerateOutput& o : *clean) REQUIRE_FALSE(o.error);
  bool killed = false;
  pid_t victim = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = engine->generate(requests, kill_rank_once(rank, killed, victim));
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(out.ok());
  REQUIRE(killed);
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i << ": " << ((*out)[i].error ? (*out)[i].error->message : std::string("no error")));
    REQUIRE_FALSE((*out)[i].error);
    CHECK((*out)[i].generated_ids == (*clean)[i].generated_ids);
  }
  CHECK(waited < std::chrono::seconds(20));
  const auto now = worker_processes_of(getpid());
  CHECK(now.size() == workers);
  CHECK(std::find(now.begin(), now.end(), victim) == now.end());
  auto fleet = engine->fleet();
  REQUIRE(fleet.ok());
  CHECK(fleet->replicas.at(0).incarnation == 1);
  CHECK(fleet->replicas.at(0).state == "serving");
  engine.reset();
  CHECK(worker_processes_of(getpid()).empty());
}

inline std::filesystem::path write_moe(const std::filesystem::path& dir, const std::string& architecture,
                                const std::string& experts) {
  return model_folder(dir, R"({"architectures": [")" + architecture + R"("], "hidden_size": 256,
                                     "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                                     "intermediate_size": 512, "vocab_size": 512, "max_position_embeddings": 512,
                                     "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
                                     "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2, )" +
                                     experts + "}");
}

inline std::filesystem::path write_mixtral(const std::filesystem::path& dir) {
  return write_moe(dir, "MixtralForCausalLM", R"("num_local_experts": 8, "num_experts_per_tok": 2)");
}

}  // namespace actord::test
