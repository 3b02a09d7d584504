// actord bench serve: load on an OpenAI-compatible server (actord serve, llama-server, vLLM...) in the spirit of
// vLLM's `bench serve`: streaming completions of random token-id prompts or of a JSONL dataset's prompts
// (bench_serve_dataset.hpp) at a fixed concurrency, arriving all at once or as a Poisson process; request
// throughput, token throughput and TTFT / TPOT / ITL / E2E statistics as a table, JSON and an SVG picture
// (bench_serve_plot.hpp), with a progress bar on a terminal.
#include <utility>  // before Boost 1.74 asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <tuple>
#include <utility>
#include <unistd.h>

#include "apps/actord/bench_serve_dataset.hpp"
#include "apps/actord/bench_serve_plot.hpp"
#include "apps/actord/commands.hpp"
#include "apps/actord/http_client.hpp"
#include "apps/actord/load_report.hpp"

namespace actord::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

// One streaming request: the arrival time of its first byte of content and of every chunk.
struct Stream : std::enable_shared_from_this<Stream> {
  beast::tcp_stream socket;
  std::string request;
  std::string received;
  std::array<char, 8192> buffer{};
  clock_type::time_point sent;
  std::vector<clock_type::time_point> chunks;  // one per data event with text
  std::optional<int64_t> prompt_tokens, completion_tokens;  // the server's usage, when it sends one
  std::string error;
  bool done = false;
  size_t parsed_to = 0;
  std::function<void()> on_done;
  Stream(asio::io_context& ioc, std::string req) : socket(ioc), request(std::move(req)) {}

  void start(const asio::ip::tcp::resolver::results_type& at) {
    sent = clock_type::now();
    socket.async_connect(at, [self = shared_from_this()](beast::error_code ec, auto) {
      if (ec) return self->finish("connect: " + ec.message());
      asio::async_write(self->socket, asio::buffer(self->request), [self](beast::error_code ec, size_t) {
        if (ec) return self->finish("write: " + ec.message());
        self->read();
      });
    });
  }
  void read() {
    socket.async_read_some(asio::buffer(buffer), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->received.append(self->buffer.data(), n);
      self->scan(clock_type::now());
      if (self->done) return;
      if (ec) return self->finish(self->received.find("[DONE]") == std::string::npos ? "closed early" : "");
      self->read();
    });
  }
  // Events seen so far: a chunk with text is a token (servers send one per token when streaming).
  void scan(clock_type::time_point now) {
    if (received.rfind("HTTP/1.1 200", 0) != 0 && received.size() >= 12) {
      return finish("status " + received.substr(9, 3) + ": " + received.substr(received.find("\r\n\r\n") + 4, 300));
    }
    for (size_t at; (at = received.find("data: ", parsed_to)) != std::string::npos;) {
      const size_t end = received.find("\n\n", at);
      if (end == std::string::npos) return;
      parsed_to = end + 2;
      const std::string data = received.substr(at + 6, end - at - 6);
      if (data == "[DONE]") return finish("");
      const json chunk = json::parse(data, nullptr, false);
      if (chunk.is_discarded()) continue;
      if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
        if (usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number_integer())
          prompt_tokens = (*usage)["prompt_tokens"].get<int64_t>();
        if (usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number_integer())
          completion_tokens = (*usage)["completion_tokens"].get<int64_t>();
      }
      if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) continue;
      const json& text = chunk["choices"][0]["text"];
      if (text.is_string() && !text.get<std::string>().empty()) chunks.push_back(now);
    }
  }
  void finish(std::string why) {
    if (done) return;
    done = true;
    error = std::move(why);
    beast::error_code ec;
    socket.socket().close(ec);
    if (on_done) on_done();
  }
};

}  // namespace

CLI::App* add_bench_serve_command(CLI::App& bench, BenchServeArgs& args) {
  auto* cmd = bench.add_subcommand("serve", "Load on an OpenAI-compatible server: throughput, TTFT, TPOT, ITL, E2E");
  cmd->add_option("--url", args.url, "Server base URL, e.g. http://127.0.0.1:8000")->required();
  cmd->add_option("--model", args.model, "Model name sent in each request (default: none)");
  cmd->add_option("--num-prompts", args.num_prompts, "Requests in total")->capture_default_str();
  cmd->add_option("--concurrency", args.concurrency, "Requests in flight at most")->capture_default_str();
  cmd->add_option("--request-rate", args.request_rate,
                  "Requests per second, arriving as a Poisson process (0: all at once)")->capture_default_str();
  cmd->add_option("--input-len", args.input_len, "Prompt tokens (random ids)")->capture_default_str();
  cmd->add_option("--output-len", args.output_len, "Tokens to generate")->capture_default_str();
  cmd->add_option("--random-range-ratio", args.range_ratio,
                  "Random lengths: each drawn from [len * (1 - r), len * (1 + r)]")->capture_default_str();
  cmd->add_option("--vocab", args.vocab, "Prompt ids are drawn from [3, vocab)")->capture_default_str();
  cmd->add_option("--dataset", args.dataset,
                  "JSONL file of prompts: ShareGPT {\"conversations\"}, {\"messages\"} or {\"prompt\", \"output_len\"} lines");
  cmd->add_option("--tokenizer", args.tokenizer,
                  "Model folder whose tokenizer measures dataset prompts and replies (output length = reply's)");
  cmd->add_option("--max-model-len", args.max_model_len,
                  "With --tokenizer: skip dataset pairs longer than this in all")->capture_default_str();
  cmd->add_option("--warmup", args.warmup, "Requests sent (and not counted) before the run")->capture_default_str();
  cmd->add_flag("--no-ignore-eos", args.no_ignore_eos, "Let the model stop at end-of-sequence");
  cmd->add_option("--seed", args.seed, "Seed of the prompts and arrivals")->capture_default_str();
  cmd->add_option("--save", args.save, "Also write the report (JSON) to this file");
  cmd->add_option("--plot", args.plot, "Also draw the run (latency CDFs, tokens/s over time) into this SVG file");
  cmd->add_flag("--no-progress", args.no_progress, "No progress bar (there is none when stderr is not a terminal)");
  cmd->add_flag("--json", args.json, "Print the report as JSON instead of a table");
  return cmd;
}

Status check_workload(const BenchServeArgs& args) {
  for (auto [flag, value, least] : {std::tuple{"--num-prompts", args.num_prompts, 1},
                                    {"--concurrency", args.concurrency, 1}, {"--input-len", args.input_len, 1},
                                    {"--output-len", args.output_len, 1}, {"--vocab", args.vocab, 4},
                                    {"--warmup", args.warmup, 0}, {"--max-model-len", args.max_model_len, 2}}) {
    if (value < least)
      return Error{Errc::invalid_argument, std::string(flag) + ": must be at least " + std::to_string(least) +
                                               ", got " + std::to_string(value)};
  }
  if (!(args.range_ratio >= 0 && args.range_ratio < 1))
    return Error{Errc::invalid_argument, "--random-range-ratio must be in [0, 1)"};
  if (!(args.request_rate >= 0) || std::isinf(args.request_rate))
    return Error{Errc::invalid_argument, "--request-rate must be a finite number >= 0"};
  return {};
}

Result<std::vector<BenchRequest>> make_bench_requests(const BenchServeArgs& args, int count, std::mt19937_64& rng) {
  if (args.dataset.empty()) {
    return random_requests({count, args.input_len, args.output_len, args.range_ratio, args.vocab}, rng);
  }
  std::optional<Tokenizer> tokenizer;
  if (!args.tokenizer.empty()) {
    auto loaded = Tokenizer::load(args.tokenizer);
    if (!loaded) return make_error(Errc::invalid_argument, "--tokenizer: " + loaded.error().message);
    tokenizer.emplace(std::move(*loaded));
  }
  return dataset_requests({args.dataset, count, args.output_len, args.max_model_len, tokenizer ? &*tokenizer : nullptr});
}

namespace {

std::string http_request(const Target& target, const BenchServeArgs& args, const BenchRequest& r) {
  json body{{"max_tokens", r.output_len},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"ignore_eos", !args.no_ignore_eos}};
  if (r.prompt_text) {
    body["prompt"] = *r.prompt_text;
  } else {
    body["prompt"] = r.prompt_ids;
  }
  if (!args.model.empty()) body["model"] = args.model;
  const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return "POST " + target.path + "/v1/completions HTTP/1.1\r\nHost: " + target.host +
         "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
         std::to_string(payload.size()) + "\r\n\r\n" + payload;
}

// "[=====>     ]  37/128 requests  12,345 tok/s" on stderr, redrawn in place.
void draw_progress(size_t done, size_t total, size_t tokens, double seconds) {
  constexpr int kWidth = 30;
  const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
  std::fprintf(stderr, "\r[%s] %zu/%zu requests  %.0f tok/s  %.1f s ", bar.c_str(), done, total,
               seconds > 0 ? double(tokens) / seconds : 0.0, seconds);
  std::fflush(stderr);
}

}  // namespace

int run_bench_serve(const BenchServeArgs& args) {
  auto target = parse_url(args.url);
  if (!target)
    return print_error({Errc::invalid_argument, "--url: expected http://host[:port][/prefix] with a port in "
                                                "[1, 65535], got '" + args.url + "'"}), 2;
  if (auto checked = check_workload(args); !checked) return print_error(checked.error()), 2;
  std::mt19937_64 rng(args.seed);
  auto requests = make_bench_requests(args, args.warmup + args.num_prompts, rng);
  if (!requests) return print_error(requests.error()), 2;
  asio::io_context ioc;
  asio::ip::tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto at = resolver.resolve(target->host, target->port, ec);
  if (ec) return print_error({Errc::invalid_argument, "--url: cannot resolve " + target->host}), 2;
  const bool progress = !args.json && !args.no_progress && isatty(STDERR_FILENO);

  // Runs requests [first, first + count), at most `concurrency` at once, arrivals spaced by the Poisson process
  // when a rate is given.
  auto run = [&](int first, int count, std::vector<std::shared_ptr<Stream>>& streams) {
    std::exponential_distribution<double> gap(args.request_rate > 0 ? args.request_rate : 1.0);
    int launched = 0, running = 0;
    size_t finished = 0;
    const auto start = clock_type::now();
    auto next_arrival = start;
    asio::steady_timer timer(ioc), redraw(ioc);
    std::function<void()> launch = [&] {
      while (launched < count && running < args.concurrency && clock_type::now() >= next_arrival) {
        auto s = std::make_shared<Stream>(ioc, http_request(*target, args, (*requests)[size_t(first + launched)]));
        s->on_done = [&] {
          --running;
          ++finished;
          asio::post(ioc, launch);
        };
        streams.push_back(s);
        ++launched;
        ++running;
        s->start(at);
        if (args.request_rate > 0)
          next_arrival += std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(gap(rng)));
      }
      if (launched < count && running < args.concurrency) {
        timer.expires_at(next_arrival);
        timer.async_wait([&](beast::error_code) { launch(); });
      }
      if (launched == count && running == 0) redraw.cancel();
    };
    std::function<void()> draw = [&] {
      size_t tokens = 0;
      for (const auto& st : streams) tokens += st->chunks.size();
      draw_progress(finished, size_t(count), tokens, std::chrono::duration<double>(clock_type::now() - start).count());
      if (finished == size_t(count)) return;
      redraw.expires_after(std::chrono::milliseconds(200));
      redraw.async_wait([&](beast::error_code e) {
        if (!e) draw();
      });
    };
    asio::post(ioc, launch);
    if (progress) asio::post(ioc, draw);
    ioc.restart();
    ioc.run();
    if (progress) {
      size_t tokens = 0;
      for (const auto& st : streams) tokens += st->chunks.size();
      draw_progress(finished, size_t(count), tokens, std::chrono::duration<double>(clock_type::now() - start).count());
      std::fprintf(stderr, "\n");
    }
  };

  std::vector<std::shared_ptr<Stream>> warm, streams;
  if (args.warmup > 0) run(0, args.warmup, warm);
  const auto start = clock_type::now();
  run(args.warmup, args.num_prompts, streams);
  const double wall = std::chrono::duration<double>(clock_type::now() - start).count();

  LoadReport figures;
  for (size_t i = 0; i < streams.size(); ++i) {
    const auto& s = streams[i];
    if (!s->error.empty() || s->chunks.empty()) {
      figures.add_failure(s->error.empty() ? "no tokens" : s->error);
      continue;
    }
    std::vector<double> chunks;
    for (auto t : s->chunks) chunks.push_back(std::chrono::duration<double>(t - start).count());
    // The server's counts when it reports usage (a text chunk may hold several tokens, or none), else ours.
    figures.add(std::chrono::duration<double>(s->sent - start).count(), chunks,
                s->prompt_tokens ? size_t(*s->prompt_tokens)
                                 : size_t((*requests)[size_t(args.warmup) + i].prompt_tokens),
                s->completion_tokens ? size_t(*s->completion_tokens) : s->chunks.size());
  }
  const std::string source = args.dataset.empty() ? "random" : args.dataset;
  json report = figures.json(args, wall);
  report["url"] = args.url;
  auto write_file = [](const std::string& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return print_error({Errc::invalid_argument, "cannot write " + path}), false;
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return true;
  };
  bool written = true;
  if (!args.save.empty()) written &= write_file(args.save, report.dump(2) + "\n");
  if (!args.plot.empty()) {
    auto to_ms = [](std::vector<double> v) {
      for (double& x : v) x *= 1e3;
      return v;
    };
    RunPlot plot{"actord bench serve: " + args.url + ", " + std::to_string(figures.completed()) + " requests (" +
                     source + "), concurrency " + std::to_string(args.concurrency),
                 {{"TTFT", to_ms(figures.ttft())},
                  {"TPOT", to_ms(figures.tpot())},
                  {"ITL", to_ms(figures.itl())},
                  {"E2E", to_ms(figures.e2e())}},
                 figures.token_times(),
                 wall};
    written &= write_file(args.plot, plot_svg(plot));
  }
  if (args.json) {
    std::printf("%s\n", report.dump().c_str());
  } else {
    LoadReport::print(report, LoadReport::title("actord bench serve: " + args.url, args));
  }
  return figures.failed() == 0 && written ? 0 : 1;
}

}  // namespace actord::cli
