#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "actors/engine.hpp"
#include "apps/actord/commands.hpp"

namespace actord::cli {
namespace {

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return make_error(Errc::invalid_argument, "--prompt-ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) return make_error(Errc::invalid_argument, "--prompt-ids: no token ids given");
  return ids;
}

// [{"logprob": l, "top": [[id, logprob], ...]}, ...], one per generated token.
nlohmann::json logprobs_json(const std::vector<TokenLogprobs>& logprobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& lp : logprobs) {
    nlohmann::json top = nlohmann::json::array();
    for (size_t k = 0; k < lp.top_ids.size(); ++k) top.push_back({lp.top_ids[k], lp.top_logprobs[k]});
    out.push_back({{"logprob", lp.logprob}, {"top", top}});
  }
  return out;
}

// SamplingOptions::validate, its message naming the flag ("top_p: ..." -> "--top-p: ..."); vocab_size 0 skips the
// checks that need the model.
Status check_sampling_flags(const SamplingOptions& sampling, int vocab_size) {
  auto valid = sampling.validate(vocab_size);
  if (valid) return {};
  std::string message = valid.error().message;
  const size_t colon = message.find(':');
  std::string flag = "--" + message.substr(0, colon);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return make_error(Errc::invalid_argument, flag + message.substr(colon));
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& args) {
  auto* cmd = app.add_subcommand("generate", "Generate text from prompts with the model of a topology");
  add_common_options(cmd, args.common, "warn");
  auto* prompt = cmd->add_option("--prompt", args.prompts,
                                 "Prompt text (repeatable: several prompts are generated together, in one batch)");
  auto* ids = cmd->add_option("--prompt-ids", args.prompt_ids, "Prompt as comma-separated token ids, e.g. 1,403,407");
  prompt->excludes(ids);
  cmd->add_option("--max-tokens", args.max_tokens, "Tokens to generate at most per prompt")->capture_default_str();
  SamplingOptions& o = args.sampling;
  cmd->add_option("--temperature", o.temperature, "Sampling temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling: keep the smallest set of tokens with this mass")
      ->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "Keep the k most likely tokens; 0 keeps all")->capture_default_str();
  cmd->add_option("--min-p", o.min_p, "Drop tokens less likely than this fraction of the most likely one")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", o.repetition_penalty,
                  "Penalise tokens already in the prompt or the output (> 1 discourages repeats)")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o.frequency_penalty,
                  "Subtract this times each token's count in the output from its logit, in [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o.presence_penalty,
                  "Subtract this from the logit of every token already in the output, in [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--min-tokens", o.min_tokens, "Never stop (end-of-sequence) before this many tokens");
  cmd->add_option("--logprobs", o.logprobs,
                  "With --json: each generated token's logprob and the N best alternatives (0-20)");
  cmd->add_option("--prompt-logprobs", o.prompt_logprobs,
                  "With --json: each prompt token's logprob (the first is null) and the N best there (0-20)");
  cmd->add_option("--seed", o.seed, "Random seed; the same seed gives the same text (0: random)");
  cmd->add_option("--n", o.n, "Samples per prompt (1-128): the prompt is computed once, sample i uses seed + i")
      ->capture_default_str();
  cmd->add_flag("--json", args.json, "Print one JSON object per prompt: generated_ids, text, ttft_ms, ...");
  cmd->add_flag("--echo", args.echo, "Print the prompt before the generated text");
  cmd->add_flag("--ignore-eos", args.ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_option("--stop", args.stop, "Stop at this text, which is not printed (repeatable)")->take_all();
  cmd->add_option("--lora", args.lora,
                  "Run the prompts on this LoRA adapter of lora.modules (NAME), or declare one and run on it "
                  "(NAME=PATH: a PEFT adapter folder)");
  add_response_format_options(cmd, args.response_format);
  return cmd;
}

int run_generate(const GenerateArgs& args) {
  if (!apply_log_level(args.common.log_level)) return 2;
  if (args.max_tokens < 1) return fail({Errc::invalid_argument, "--max-tokens must be at least 1, got " +
                                                                    std::to_string(args.max_tokens)});
  if (auto valid = check_sampling_flags(args.sampling, 0); !valid) return fail(valid.error());
  if (args.prompts.empty() && args.prompt_ids.empty()) {
    return fail({Errc::invalid_argument, "give a prompt with --prompt TEXT or --prompt-ids 1,2,3"});
  }

  CommonArgs common = args.common;
  auto lora = lora_request_option(args.lora, common.set);
  if (!lora) return fail(lora.error());
  auto topology = load_topology_of(common);
  if (!topology) return fail(topology.error());
  if (static_cast<int64_t>(args.sampling.n) > topology->engine.max_num_seqs) {
    return fail({Errc::invalid_argument, "--n: must be at most engine.max_num_seqs (" +
                                             std::to_string(topology->engine.max_num_seqs) +
                                             "): the samples run together, got " + std::to_string(args.sampling.n)});
  }

  std::vector<GenerateRequest> requests;
  SamplingOptions sampling = args.sampling;
  if (auto applied = apply_response_format(args.response_format, sampling); !applied) return fail(applied.error());
  if (sampling.structured() && args.ignore_eos)
    return fail({Errc::invalid_argument, "--ignore-eos cannot go with --response-format " +
                                             args.response_format.format + ": the output ends at its end of sequence"});
  if (!args.prompt_ids.empty()) {
    auto ids = parse_ids(args.prompt_ids);
    if (!ids) return fail(ids.error());
    requests.push_back(GenerateRequest{std::nullopt, *ids, static_cast<uint32_t>(args.max_tokens), sampling,
                                       args.ignore_eos, args.stop});
  }
  for (const auto& p : args.prompts) {
    requests.push_back(
        GenerateRequest{p, {}, static_cast<uint32_t>(args.max_tokens), sampling, args.ignore_eos, args.stop});
  }

  EngineOptions options;
  options.log_level = args.common.log_level;
  options.trace_path = args.common.trace;
  auto engine = Engine::start(*topology, options);
  if (!engine) return fail(engine.error());
  if (auto valid = check_sampling_flags(args.sampling, (*engine)->model_config().vocab_size); !valid)
    return fail(valid.error());
  auto adapter = lora_request_id(**engine, *lora);
  if (!adapter) return fail(adapter.error());
  for (GenerateRequest& r : requests) r.lora = *adapter;

  // Streaming to the terminal only makes sense for one prompt of one sample in text mode.
  const bool stream = !args.json && requests.size() == 1 && sampling.n == 1;
  if (stream && args.echo && requests[0].prompt) {
    std::fputs(requests[0].prompt->c_str(), stdout);
    std::fflush(stdout);
  }
  TextCallback on_text;
  if (stream) {
    on_text = [](size_t, std::string_view delta) {
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
    };
  }
  auto outputs = (*engine)->generate(requests, on_text);
  if (!outputs) return fail(outputs.error());

  nlohmann::json step_stats;
  if (args.json) {
    auto stats = (*engine)->stats();
    if (!stats) return fail(stats.error());
    step_stats = step_stats_json(*stats);
  }
  int code = 0;
  for (size_t i = 0; i < outputs->size(); ++i) {
    const GenerateOutput& out = (*outputs)[i];
    if (out.error) {
      print_error(*out.error);
      code = std::max(code, exit_code_for(*out.error));
      continue;
    }
    if (args.json) {
      nlohmann::json j;
      if (sampling.n > 1) j["sample_index"] = out.sample_index;
      j["prompt_ids"] = out.prompt_ids;
      j["generated_ids"] = out.generated_ids;
      j["text"] = out.text;
      j["finish_reason"] = out.finish_reason;
      j["prompt_tokens"] = out.prompt_ids.size();
      j["completion_tokens"] = out.generated_ids.size();
      j["ttft_ms"] = out.ttft_ms;
      j["decode_tokens_per_s"] = out.decode_tokens_per_s;
      j["total_ms"] = out.total_ms;
      if (sampling.logprobs >= 0) j["logprobs"] = logprobs_json(out.logprobs);
      if (sampling.prompt_logprobs >= 0) {
        nlohmann::json prompt = logprobs_json(out.prompt_logprobs);
        prompt.insert(prompt.begin(), nullptr);  // the first prompt token has no logprob
        j["prompt_logprobs"] = prompt;
      }
      j["scheduler"] = step_stats;  // for the whole run, shared by every prompt of it
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else if (stream) {
      std::printf("\n");
    } else {
      if (args.echo && requests[out.request_index].prompt) std::fputs(requests[out.request_index].prompt->c_str(), stdout);
      std::printf("%s\n", out.text.c_str());
      if (i + 1 < outputs->size()) std::printf("---\n");
    }
  }
  return code;
}

}  // namespace actord::cli
