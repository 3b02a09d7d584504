// Regressions of what the fuzzers (fuzz/) found, and the number rules of user input they check: every HTTP body
// number and every safetensors header number is range-checked as read, with errors naming the field or tensor.
// Each case failed (wrong acceptance, crash or sanitizer report) before its fix.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actors/worker_core.hpp"
#include "api/openai_protocol.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "memory/safetensors.hpp"
#include "sim/cost_profile.hpp"
#include "sim/trace_steps.hpp"
#include "structured/grammar.hpp"
#include "test_util.hpp"
#include "worker_test_util.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;

namespace {

// --- safetensors ------------------------------------------------------------------------------------------------

// A file image: 8-byte header length, the header, the data.
std::string safetensors_image(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(data_bytes, '\0');
}

// Opens the image as a file, as the weight loader does; the error's file name is shown as "f.safetensors".
Result<SafetensorsFile> open_safetensors(const test::TempDir& dir, const std::string& header, size_t data_bytes) {
  test::write_file(dir.path() / "f.safetensors", safetensors_image(header, data_bytes));
  return SafetensorsFile::open(dir.path() / "f.safetensors");
}

Error safetensors_error(const std::string& header, size_t data_bytes = 0) {
  test::TempDir dir;
  auto opened = open_safetensors(dir, header, data_bytes);
  REQUIRE_FALSE(opened.ok());
  Error e = opened.error();
  const std::string path = (dir.path() / "f.safetensors").string();
  if (e.message.rfind(path, 0) == 0) e.message = "f.safetensors" + e.message.substr(path.size());
  return e;
}

// --- HTTP bodies ------------------------------------------------------------------------------------------------

struct Api {
  Tokenizer tokenizer;
  ParseContext context;
  static const Api& get() {
    static const Api api = [] {
      auto tok = Tokenizer::load(test::stories_dir());
      REQUIRE(tok.ok());
      return Api{std::move(*tok), {}};
    }();
    return api;
  }
  ParseContext parse_context() const { return ParseContext{tokenizer.vocab_size(), &tokenizer, nullptr, nullptr}; }
};

ApiError refusal(const std::string& body, bool chat = false) {
  auto parsed = parse_request(body, chat, Api::get().parse_context());
  REQUIRE(std::holds_alternative<ApiError>(parsed));
  const ApiError& e = std::get<ApiError>(parsed);
  CHECK(e.status == 400);
  return e;
}

ApiRequest accepted(const std::string& body) {
  auto parsed = parse_request(body, false, Api::get().parse_context());
  if (const auto* e = std::get_if<ApiError>(&parsed)) FAIL("refused: " << e->message);
  return std::get<ApiRequest>(parsed);
}

// --- worker messages --------------------------------------------------------------------------------------------

// A WorkerCore on stories260K: 4-token blocks, 16 KV blocks, 4 swap blocks.
std::unique_ptr<WorkerCore> stories_worker() { return test::stories_worker_core(4); }

// One new sequence's first slice, changed by `edit` before it is sent; returns the step's error message ("" if none).
template <class Edit>
std::string step_error(WorkerCore& core, Edit&& edit) {
  const wire_msg step = build<wire::ExecuteStep>([&](wire::ExecuteStep::Builder out) {
    auto s = out.initSeqs(1)[0];
    s.setSeqId(1);
    fill_list(s.initTokenIds(2), std::vector<int32_t>{1, 403});
    s.setNewSequence(true);
    SamplingOptions greedy;
    greedy.temperature = 0.0f;
    to_wire(greedy, s.initSampling());
    s.setPromptLen(2);
    fill_list(s.initBlockTable(1), std::vector<uint32_t>{0});
    s.setSample(true);
    edit(out, s);
  });
  const wire_msg reply = core.execute(step);
  WireReader reader(reply);
  auto result = reader.root<wire::StepResult>();
  return has_error(result.getError()) ? get_error(result.getError()).message : "";
}

// --- chat templates ---------------------------------------------------------------------------------------------

// The rendered text, or "error: <message>".
std::string render(const std::string& source) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl) return "parse error: " + tmpl.error().message;
  auto text = tmpl->render(nlohmann::json::object());
  return text ? *text : "error: " + text.error().message;
}

}  // namespace

TEST_CASE("safetensors: a shape whose byte size overflows 64 bits is refused naming the tensor", "[fuzz][memory]") {
  // [2^62, 4] f32 is 2^66 bytes: it wrapped to 0 and matched data_offsets [0, 0].
  const Error e = safetensors_error(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})");
  CHECK(e.code == Errc::parse_error);
  CHECK(e.message == "f.safetensors: tensor 'w': shape [4611686018427387904, 4] of F32 overflows 64 bits of bytes");
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"BF16","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})")
                 .message,
             Catch::Contains("tensor 'w': shape [4294967296, 4294967296, 0] of BF16 overflows"));
}

TEST_CASE("safetensors: dimensions and offsets must be non-negative integers", "[fuzz][memory]") {
  // [2.5] was read as [2] and accepted.
  CHECK(safetensors_error(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8).message ==
        "f.safetensors: tensor 'w' has a bad dimension 2.5 (dimensions are integers from 0 to 2^63 - 1)");
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})").message,
             Catch::Contains("tensor 'w' has a bad dimension -1"));
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})").message,
             Catch::Contains("tensor 'w' has a bad dimension 9223372036854775808"));
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4).message,
             Catch::Contains("tensor 'w' has a bad dimension an array"));
  CHECK(safetensors_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4).message ==
        "f.safetensors: tensor 'w' has bad data_offsets [-4, 0] (must be integers with begin <= end)");
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0.5,4]}})", 4).message,
             Catch::Contains("tensor 'w' has bad data_offsets [0.5, 4]"));
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8).message,
             Catch::Contains("tensor 'w' has bad data_offsets [8, 4]"));
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4).message,
             Catch::Contains("tensor 'w' has bad data_offsets (must be [begin, end])"));
  CHECK_THAT(safetensors_error(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4).message,
             Catch::Contains("tensor 'w': malformed entry: shape must be a list"));
  CHECK_THAT(safetensors_error(R"({"w":[1,2]})").message, Catch::Contains("tensor 'w': malformed entry: not an object"));
}

TEST_CASE("safetensors: offsets past the file and sizes that do not match are refused naming the tensor",
          "[fuzz][memory]") {
  CHECK(safetensors_error(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8).message ==
        "f.safetensors: truncated safetensors file: tensor 'w' ends at byte 16 of 8 data bytes");
  CHECK(safetensors_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 8)
            .message == "f.safetensors: truncated safetensors file: tensor 'w' ends at byte 18446744073709551615 of "
                        "8 data bytes");
  CHECK(safetensors_error(R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", 8).message ==
        "f.safetensors: tensor 'w' size does not match its shape: [3] of F16 is 6 bytes, data_offsets span 8");
  // A valid file still reads, scalars and empty tensors included.
  test::TempDir dir;
  auto ok = open_safetensors(dir,
                             R"({"__metadata__":{"format":"pt"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                             R"("e":{"dtype":"BF16","shape":[0,7],"data_offsets":[4,4]}})",
                             4);
  REQUIRE(ok.ok());
  CHECK(ok->tensors().at("s").num_elements() == 1);
  CHECK(ok->tensors().at("e").num_elements() == 0);
}

TEST_CASE("HTTP bodies: integer fields refuse values below their minimum, floats and values beyond 64 bits",
          "[fuzz][api]") {
  // max_tokens 0 was accepted: an unsigned JSON number skipped the minimum.
  ApiError e = refusal(R"({"prompt":"x","max_tokens":0})");
  CHECK(e.param == "max_tokens");
  CHECK(e.message == "max_tokens: must be in [1, 16777216], got 0");
  CHECK(refusal(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0})", true).param ==
        "max_completion_tokens");
  CHECK(refusal(R"({"prompt":"x","max_tokens":1.5})").message == "max_tokens: must be an integer, got 1.5");
  CHECK(refusal(R"({"prompt":"x","max_tokens":16777217})").param == "max_tokens");
  CHECK(refusal(R"({"prompt":"x","seed":18446744073709551615})").param == "seed");
  CHECK(refusal(R"({"prompt":"x","seed":1e30})").param == "seed");
  CHECK(refusal(R"({"prompt":"x","top_k":4294967296})").param == "top_k");
  CHECK(refusal(R"({"prompt":"x","priority":-2147483649})").param == "priority");
  CHECK(refusal(R"({"prompt":"x","min_tokens":-1})").param == "min_tokens");
  // min_tokens beyond max_tokens (vLLM refuses it too) was accepted.
  CHECK(refusal(R"({"prompt":"x","max_tokens":4,"min_tokens":5})").message == "min_tokens: must be in [0, 4], got 5");
  CHECK(refusal(R"({"prompt":"x","min_tokens":17})").message == "min_tokens: must be in [0, 16], got 17");
  CHECK(accepted(R"({"prompt":"x","max_tokens":5,"min_tokens":5})").prompts[0].sampling.min_tokens == 5);
  CHECK(refusal(R"({"prompt":"x","best_of":0})").message == "best_of: must be in [1, 1], got 0");
  CHECK(refusal(R"({"prompt":[1,18446744073709551615]})").param == "prompt");
  CHECK(refusal(R"({"prompt":[1,-1]})").param == "prompt");
  CHECK(refusal(R"({"prompt":[1,2.0]})").param == "prompt");
  // The edges are accepted.
  CHECK(accepted(R"({"prompt":"x","max_tokens":1})").prompts[0].max_tokens == 1);
  CHECK(accepted(R"({"prompt":"x","max_tokens":16777216})").prompts[0].max_tokens == 1u << 24);
  CHECK(accepted(R"({"prompt":"x","seed":-9223372036854775808})").prompts[0].sampling.seed == 1ull << 63);
  CHECK(accepted(R"({"prompt":[0,511]})").prompts[0].prompt_ids == std::vector<int32_t>{0, 511});
}

TEST_CASE("HTTP bodies: non-finite numbers are refused with a 400 naming the field", "[fuzz][api]") {
  for (const char* field : {"temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
                            "repetition_penalty", "max_tokens", "seed"}) {
    INFO(field);
    for (const char* value : {"1e999", "-1e999", "1e300", "-3.5e38", "NaN", "Infinity"}) {
      INFO(value);
      const ApiError e = refusal(std::string(R"({"prompt":"x",")") + field + "\":" + value + "}");
      CHECK(e.param == field);
    }
  }
  // 1e999 is valid JSON beyond a double: it was "the body is not valid JSON", naming no field.
  CHECK(refusal(R"({"prompt":"x","temperature":1e999})").message == "temperature: must be finite, got '1e999'");
  CHECK(refusal(R"({"prompt":"x","top_p":-1e999})").message == "top_p: must be finite, got '-1e999'");
  CHECK(refusal(R"({"prompt":[1,1e400]})").message == "prompt: must be finite, got '1e400'");
  CHECK(refusal(R"({"prompt":"x","temperature":1e300})").message == "temperature: must be finite, got 1e+300");
  CHECK(refusal(R"({"prompt":"x","max_tokens":1e300})").message == "max_tokens: must be an integer, got 1e+300");
  CHECK_THAT(refusal(R"({"prompt":"x","temperature":NaN})").message,
             Catch::StartsWith("the body is not valid JSON (in temperature): "));
  CHECK(refusal(R"({"prompt":"x","temperature":"nan"})").message == "temperature: must be a number, got \"nan\"");
  CHECK(refusal("1e999").message == "the body is not valid JSON: '1e999' is not finite");
  CHECK_THAT(refusal("{not json").message, Catch::StartsWith("the body is not valid JSON: "));
}

TEST_CASE("HTTP bodies: deep nesting is refused while parsing, never printed or copied", "[fuzz][api]") {
  // A megabyte of '[' in a numeric field: printing it in the error message recursed once per level and overflowed
  // the stack; a deep message content did the same when copied for the chat template.
  const std::string deep = std::string(500000, '[') + std::string(500000, ']');
  CHECK(refusal(R"({"prompt":"x","max_tokens":)" + deep + "}").message == "the body nests deeper than 64 levels");
  CHECK(refusal(R"({"messages":[{"role":"user","content":)" + deep + "}]}", true).message ==
        "the body nests deeper than 64 levels");
  std::string ok = std::string(63, '[') + std::string(63, ']');
  CHECK(refusal(R"({"prompt":"x","max_tokens":)" + ok + "}").message == "max_tokens: must be an integer, got an array");
}

TEST_CASE("worker: block ids past 2^31 are out of range, not negative", "[fuzz][worker]") {
  auto core = stories_worker();
  // 2^31 + 5 turned into a negative int that passed the range check; the attention kernel read far outside the pool.
  CHECK(step_error(*core, [](auto, auto s) { fill_list(s.initBlockTable(1), std::vector<uint32_t>{2147483653u}); }) ==
        "w: block id 2147483653 out of range");
  CHECK(step_error(*core, [](auto out, auto) {
          auto c = out.initCopyBlocks(1)[0];
          c.setSrc(4294967295u);
          c.setDst(1);
        }) == "w: block copy out of range");
  CHECK(step_error(*core, [](auto out, auto) {
          auto c = out.initSwapIn(1)[0];
          c.setSrc(0);
          c.setDst(2147483648u);
        }) == "w: swap-in block out of range");
  // KV import at a block id past 2^31.
  const wire_msg import = [&] {
    wire_msg m = build<wire::ImportKv>([&](wire::ImportKv::Builder out) {
      auto e = out.initExport();
      e.setNumTokens(4);
      auto layout = e.initLayout();
      layout.setNumLayers(5);
      layout.setNumKvHeads(4);
      layout.setHeadDim(8);
      layout.setBlockSize(4);
      layout.setDtype("F32");
      e.setBlockBytes(5 * 2 * 4 * 4 * 8 * 4);
      e.setNumBlocks(1);
      fill_list(out.initBlockIds(1), std::vector<uint32_t>{2147483648u});
    });
    m.bulk.emplace_back(5 * 2 * 4 * 4 * 8 * 4, uint8_t{0});
    return m;
  }();
  const wire_msg reply = core->import_kv(import);
  WireReader reader(reply);
  CHECK(get_error(reader.root<wire::KvImported>().getError()).message ==
        "w: KV import: block id 2147483648 out of range");
  // A valid step still runs.
  CHECK(step_error(*core, [](auto, auto) {}) == "");
}

TEST_CASE("worker: positions past 2^31, forks beyond n's maximum and invalid sampling options are refused",
          "[fuzz][worker]") {
  auto core = stories_worker();
  // startPos 2^32 - 2 with 2 tokens: negative positions whose end, 0, needed no block.
  CHECK(step_error(*core, [](auto, auto s) { s.setStartPos(4294967294u); }) == "w: sequence 1: positions past 2^31");
  // 589,824 forks: as many copies of the logits row and draws, gigabytes for one message.
  CHECK(step_error(*core, [](auto, auto s) { s.setForks(589824); }) ==
        "w: sequence 1: 589824 forks, more than 128");
  CHECK(step_error(*core, [](auto, auto s) {
          SamplingOptions o;
          o.top_k = 100000;
          to_wire(o, s.initSampling());
        }) == "w: sequence 1: top_k: must be at most the vocabulary size (512), got 100000");
  CHECK(step_error(*core, [](auto, auto s) {
          SamplingOptions o;
          o.temperature = std::numeric_limits<float>::quiet_NaN();
          to_wire(o, s.initSampling());
        }) == "w: sequence 1: temperature: must be finite and >= 0, got nan");
  CHECK(step_error(*core, [](auto, auto s) { s.setForks(128); }) == "");
}

TEST_CASE("worker: a slice without tokens is refused", "[fuzz][worker]") {
  auto core = stories_worker();
  // With sample set, the model took the last row of an empty slice: row -1, before its hidden states.
  CHECK(step_error(*core, [](auto, auto s) { s.initTokenIds(0); }) == "w: sequence 1: a slice without tokens");
  CHECK(step_error(*core, [](auto, auto s) {
          s.initTokenIds(0);
          s.setSample(false);
        }) == "w: sequence 1: a slice without tokens");
}

TEST_CASE("chat templates: 64-bit integer arithmetic fails on overflow instead of wrapping", "[fuzz][chat_template]") {
  // 2^62 * 2 was signed overflow (undefined behaviour; it printed a negative number).
  CHECK(render("{{ 4611686018427387904 * 2 }}") == "error: chat_template line 1: integer overflow in '*'");
  CHECK(render("{{ 9223372036854775807 + 1 }}") == "error: chat_template line 1: integer overflow in '+'");
  CHECK(render("{{ -9223372036854775807 - 2 }}") == "error: chat_template line 1: integer overflow in '-'");
  CHECK(render("{{ (-9223372036854775807 - 1) // -1 }}") == "error: chat_template line 1: integer overflow in '//'");
  CHECK(render("{{ (-9223372036854775807 - 1) % -1 }}") == "0");
  CHECK(render("{{ -(-9223372036854775807 - 1) }}") == "error: chat_template line 1: integer overflow in unary '-'");
  CHECK(render("{{ (-9223372036854775807 - 1)|abs }}") == "error: chat_template line 1: integer overflow in abs()");
  // ** multiplied at most 64 times: 2 ** 64 wrapped to 0 and (-1) ** 65 gave 1.
  CHECK(render("{{ 2 ** 64 }}") == "error: chat_template line 1: integer overflow in '**'");
  CHECK(render("{{ 2 ** 62 }}|{{ (-1) ** 65 }}|{{ 1 ** 1000 }}|{{ 0 ** 0 }}|{{ 7 ** 0 }}") ==
        "4611686018427387904|-1|1|1|1");
  // A float beyond 64 bits converted to int was undefined behaviour.
  CHECK(render("{{ 1e300|int }}") == "error: chat_template line 1: integer overflow in int");
  CHECK(render("{{ '1e19'|int }}") == "error: chat_template line 1: integer overflow in int");
  CHECK(render("{{ -2.5|int }}|{{ '1e3'|int }}") == "-2|1000");
}

TEST_CASE("chat templates: huge counts and steps end instead of overflowing", "[fuzz][chat_template]") {
  // The repetition check multiplied in size_t: 2 * 2^63 wrapped to 0 and the loop ran 2^63 times.
  CHECK(render("{{ 'ab' * 9223372036854775807 }}") == "error: chat_template line 1: repetition too large");
  // A namespace stored into itself was a shared-pointer cycle, leaked (found by the fuzzer); through a list and
  // another namespace too. Storing other namespaces and values is unchanged.
  CHECK(render("{% set ns = namespace(c=0) %}{% set ns.c = ns %}") ==
        "error: chat_template line 1: cannot store namespace 'ns' inside itself");
  CHECK(render("{% set a = namespace(x=1) %}{% set b = namespace(y=[a]) %}{% set a.x = b %}") ==
        "error: chat_template line 1: cannot store namespace 'a' inside itself");
  CHECK(render("{% set a = namespace(x=1) %}{% set b = namespace(y=a) %}{% set b.y = [a, 2] %}{{ b.y[0].x }}") == "1");
  // indent(width) made a string of `width` spaces: 10^16 of them (found by the fuzzer).
  CHECK(render("{{ 'x'|indent(11111111111111114) }}") == "error: chat_template line 1: indent width too large");
  CHECK(render("{{ 'a\nb'|indent(3) }}") == "a\n   b");
  // range() stepped past INT64_MAX (undefined behaviour, then a million negative numbers).
  CHECK(render("{% for i in range(9223372036854775800, 9223372036854775807, 5) %}{{ i }},{% endfor %}") ==
        "9223372036854775800,9223372036854775805,");
  // A slice step past INT64_MAX wrapped to a negative index and read before the list.
  CHECK(render("{{ [1, 2, 3][1::9223372036854775807] }}") == "[2]");
  CHECK(render("{{ 'abc'[2::9223372036854775807] }}") == "c");
  CHECK(render("{{ raise_exception() }}") == "error: chat_template line 1: raise_exception() takes one message");
}

namespace {

// Loads a tokenizer.json made of stories260K's with `edit` applied; returns the load error ("" when it loads).
template <class Edit>
std::string tokenizer_error(Edit&& edit, std::vector<int32_t>* encoded = nullptr) {
  std::ifstream in(test::stories_dir() / "tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  test::TempDir dir;
  test::write_file(dir.path() / "tokenizer.json", j.dump());
  auto tok = Tokenizer::load(dir.path());
  if (!tok) return tok.error().message;
  if (encoded) *encoded = tok->encode("hello", true);
  return "";
}

}  // namespace

TEST_CASE("tokenizer.json: token ids must be integers below 2^24", "[fuzz][tokenizer]") {
  // A float id was converted to an integer unchecked (undefined behaviour past 2^63; 2.0 was read as 2).
  CHECK(tokenizer_error([](nlohmann::json& j) { j["model"]["vocab"]["zzz"] = 2.0; }) ==
        "tokenizer.json: bad id for token 'zzz' (ids are integers from 0 to 16777215)");
  CHECK(tokenizer_error([](nlohmann::json& j) { j["model"]["vocab"]["zzz"] = 2.4e43; }) ==
        "tokenizer.json: bad id for token 'zzz' (ids are integers from 0 to 16777215)");
  // Ids up to 2^30 were accepted, and the id table sized by the largest: 32 GB of strings for one entry.
  CHECK(tokenizer_error([](nlohmann::json& j) { j["model"]["vocab"]["zzz"] = 16777216; }) ==
        "tokenizer.json: bad id for token 'zzz' (ids are integers from 0 to 16777215)");
  // Added tokens: 1.5 was truncated to 1, 2^31 - 1 made the vocabulary size overflow.
  CHECK(tokenizer_error([](nlohmann::json& j) { j["added_tokens"][0]["id"] = 1.5; }) ==
        "tokenizer.json: added token '<unk>' has a bad id (ids are integers from 0 to 16777215)");
  CHECK(tokenizer_error([](nlohmann::json& j) { j["added_tokens"][0]["id"] = 2147483647; }) ==
        "tokenizer.json: added token '<unk>' has a bad id (ids are integers from 0 to 16777215)");
  CHECK(tokenizer_error([](nlohmann::json&) {}) == "");
}

TEST_CASE("tokenizer.json: post-processor ids outside the vocabulary are refused", "[fuzz][tokenizer]") {
  // encode() gave id 99999 of a 512-token vocabulary: the worker would have refused the prompt.
  auto with_ids = [](nlohmann::json ids) {
    return [ids](nlohmann::json& j) {
      j["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                         {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                             {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", ids}}}}}};
    };
  };
  CHECK(tokenizer_error(with_ids({99999})) ==
        "tokenizer.json: post_processor special token id 99999 is outside the vocabulary (size 512)");
  CHECK(tokenizer_error(with_ids({1.5})) == "tokenizer.json: post_processor special token '<s>' has a bad id");
  CHECK(tokenizer_error(with_ids(-1)) == "tokenizer.json: post_processor special token '<s>': ids must be a list");
  std::vector<int32_t> ids;
  CHECK(tokenizer_error(with_ids({1}), &ids) == "");
  REQUIRE_FALSE(ids.empty());
  CHECK(ids[0] == 1);
}

TEST_CASE("streaming detokenizer: ids without a token do not split a byte run", "[fuzz][tokenizer]") {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  // <0xD1> <0xA2> <0x9E> (ids 212, 165, 161) with ids past the vocabulary between them, as a model with padded
  // logits can sample: decode() drops those ids and decodes one invalid run (three U+FFFD); the streaming
  // detokenizer kept them, ended the run at each and emitted U+0462 from the first two bytes.
  const std::vector<int32_t> ids = {403, 212, 600, 165, 600, 161, 407};
  for (bool skip : {true, false}) {
    IncrementalDetokenizer detok(*tok, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.push({id});
    streamed += detok.finish();
    CHECK(streamed == tok->decode(ids, skip));
    CHECK(streamed == "Once\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD upon");
  }
}

TEST_CASE("streaming detokenizer: a Strip decoder of two characters does not strip through a lone space token",
          "[fuzz][tokenizer]") {
  // stories260K's tokenizer with its decoder's Strip start 1 -> 2. "Once" then "▁" (410) then "▁h" (270): the
  // window that began at the lone "▁" decoded to nothing, and its stripping went on into "▁h", so the stream lost a
  // space that decode() keeps ("Once h" for "Once  h").
  test::TempDir tmp;
  auto j = nlohmann::json::parse(std::ifstream(test::stories_dir() / "tokenizer.json"));
  for (auto& d : j["decoder"]["decoders"])
    if (d["type"] == "Strip") d["start"] = 2;
  test::write_file(tmp.path() / "tokenizer.json", j.dump());
  auto tok = Tokenizer::load(tmp.path());
  REQUIRE(tok.ok());
  const std::vector<int32_t> ids = {403, 410, 270, 410, 410, 270};
  IncrementalDetokenizer detok(*tok, true);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push({id});
  streamed += detok.finish();
  CHECK(streamed == tok->decode(ids, true));
  CHECK(streamed == "Once  h   h");
}

TEST_CASE("simulator files: keys of another type than expected are skipped or refused, never thrown", "[fuzz][sim]") {
  using nlohmann::json;
  // cost_profile_fuzz's first find: a trace event whose "ph" is a number threw nlohmann's type_error.
  const json trace = {{"traceEvents",
                       {{{"ph", 5}, {"cat", "scheduler"}, {"name", "step"}, {"args", {{"share_us", 10}}}},
                        {{"ph", "X"}, {"cat", {1}}, {"name", "step"}},
                        {{"ph", "X"}, {"cat", "scheduler"}, {"name", "step"},
                         {"args", {{"share_us", 9}, {"step", 2}, {"decode_tokens", "x"}, {"prefill_tokens", 4}}}}}}};
  auto steps = sim::steps_of_trace(trace, 0, "t.json");
  REQUIRE(steps.ok());
  REQUIRE(steps->size() == 1);
  CHECK(steps->front().shape.prefill_tokens == 4);
  CHECK(steps->front().shape.decode_tokens == 0);  // not a count: none
  // The same in a profile's words for people and the fit's report.
  const json profile = {{"version", 1},
                        {"cpu", 7},
                        {"source", {1, 2}},
                        {"replicas",
                         {{{"shape", {{"model", "m"}, {"device", "cpu"}, {"placement", "thread"}, {"tp", 1}, {"pp", 1},
                                      {"ep", 1}, {"threads", 1}}},
                           {"kv_blocks", 4},
                           {"cost", {{"knots", {{1, 5}, {2, 6}}}, {"per_pair_us", 0}, {"steps", "many"},
                                     {"median_error", "low"}}}}}},
                        {"handoff", {{"fixed_us", 1}, {"per_token_us", 2}, {"samples", "six"}}}};
  auto loaded = sim::CostProfile::from_json(profile, "p.json");
  REQUIRE(loaded.ok());
  CHECK(loaded->cpu.empty());
  CHECK(loaded->replicas.front().cost.num_steps() == 0);
  CHECK(loaded->handoff->samples == 0);
}


// --- grammars -----------------------------------------------------------------------------------------------------

TEST_CASE("grammar: an ambiguous grammar's parses are bounded per character - the fuzzer's timeout input and "
          "nullable choices repeated",
          "[fuzz][structured]") {
  // grammar_fuzz's timeout (fuzz/corpus/grammar/timeout_ambiguous): expr ::= term (("+" | root) term)*, a text of
  // ~100 bytes that almost every class takes. Before the bound on positions, each character built thousands of
  // deep stacks (19 s under the sanitizers).
  std::ifstream in(test::source_dir() / "fuzz/corpus/grammar/timeout_ambiguous", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t nul = bytes.find('\0');
  REQUIRE(nul != std::string::npos);
  auto g = structured::Grammar::compile(bytes.substr(0, nul));
  REQUIRE(g);
  structured::GrammarMatcher m(*g);
  for (const char c : bytes.substr(nul + 1)) {
    m.feed(static_cast<uint8_t>(c));
    CHECK(m.stacks() <= structured::Grammar::kMaxStacks);
    CHECK(m.stacks() > 0);
  }
  // 2^20 ways to derive nothing before "a": the duplicates are cut off at the bound, "a" is still taken.
  std::string text = "root ::= ";
  for (int i = 0; i < 20; ++i) text += "(\"\" | \"\") ";
  text += "\"a\"";
  auto nullable = structured::Grammar::compile(text);
  REQUIRE(nullable);
  structured::GrammarMatcher n(*nullable);
  CHECK(n.feed('a'));
  CHECK(n.complete());
}
