// The requests of `actord bench serve`: random token-id prompts, or prompts (and the lengths of their recorded
// replies) read from a JSONL file of conversations, as vLLM's `bench serve` samples ShareGPT.
//
// Contract: random prompts have input_len ids drawn from [3, vocab) and output_len tokens to generate; with a range
// ratio r each length is drawn uniformly from [len * (1 - r), len * (1 + r)] (at least 1). A dataset file holds one
// JSON object per line, in any of these shapes:
//   {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}   (ShareGPT)
//   {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}, ...]}
//   {"prompt": "...", "output_len": 128}   (output_len optional)
// The prompt is the first human/user turn, the reply the turn after it. With a tokenizer, the prompt and reply are
// measured in tokens: the reply's count is the output length (when the line gives none), and pairs with fewer than
// 4 tokens on either side or over max_model_len in all are skipped (as vLLM does); without one, the output length is
// the fixed one. Requests are drawn from the usable lines in file order, cycling when more are asked for. Errors
// (unreadable file, bad JSON, no usable line) name the file and line.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord::cli {

struct BenchRequest {
  std::optional<std::string> prompt_text;  // a dataset prompt, sent as text
  std::vector<int32_t> prompt_ids;         // a random prompt, sent as token ids
  int prompt_tokens = 0;                   // 0 when unknown (text without a tokenizer)
  int output_len = 0;
};

struct RandomPrompts {
  int count = 0;
  int input_len = 32;
  int output_len = 200;
  double range_ratio = 0;
  int vocab = 512;
};
std::vector<BenchRequest> random_requests(const RandomPrompts& spec, std::mt19937_64& rng);

struct DatasetSpec {
  std::string path;
  int count = 0;
  int default_output_len = 200;  // when neither the line nor a tokenizer gives one
  int max_model_len = 4096;      // pairs longer than this (prompt + reply, in tokens) are skipped
  const Tokenizer* tokenizer = nullptr;
};
Result<std::vector<BenchRequest>> dataset_requests(const DatasetSpec& spec);

}  // namespace actord::cli
