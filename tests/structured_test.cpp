// Structured outputs (structured/): the JSON object matcher against nlohmann::json's parser as the peer (random
// documents, pretty and compact, and mutations of them), its bounds (whitespace gaps as llama.cpp's JSON grammars), token bytes and the token masks built from
// them, and response_format json_object through the whole engine.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "engine_test_util.hpp"
#include "structured/json_matcher.hpp"
#include "structured/token_mask.hpp"
#include "token_mask_util.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actord;
using structured::JsonMatcher;
using json = nlohmann::json;

namespace {

// How many bytes of `text` the matcher takes (text.size(): all).
size_t taken(const std::string& text, JsonMatcher* out = nullptr) {
  JsonMatcher m;
  size_t i = 0;
  while (i < text.size() && m.feed(static_cast<uint8_t>(text[i]))) ++i;
  if (out) *out = m;
  return i;
}

bool whole_object(const std::string& text) {
  JsonMatcher m;
  return taken(text, &m) == text.size() && m.complete();
}

// A random JSON value within the matcher's bounds: nesting, strings with escapes and non-ASCII text, numbers.
json random_value(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth >= 5 ? 5 : 7));
  switch (kind) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000000) - 1000000;
    case 3: return std::ldexp(static_cast<double>(rng() % 100000) - 50000.0, static_cast<int>(rng() % 40) - 20);
    case 4: {
      static const char* pieces[] = {"a", "Lily", " ", "\"", "\\", "\n", "\t", "\x01", "é", "世界", "😀", "/", "{}"};
      std::string s;
      for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += pieces[rng() % 13];
      return s;
    }
    case 5: {
      json a = json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 10)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

// Whether nlohmann's parser takes `text` as one JSON object (its UTF-8 checks included); nullopt where it refuses a
// number beyond a double (1e999: JSON's grammar takes it, nlohmann's range check does not).
std::optional<bool> peer_object(const std::string& text) {
  try {
    return json::parse(text).is_object();
  } catch (const json::out_of_range&) {
    return std::nullopt;
  } catch (const json::exception&) {
    return false;
  }
}

// Whether every run of whitespace outside strings is a gap llama.cpp's JSON grammars allow: nothing, one space, or
// one or two newlines and up to 20 spaces or tabs; and none before the root.
bool gaps_allowed(const std::string& text) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') in_string = true;
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && (text[end] == ' ' || text[end] == '\n' || text[end] == '\t' || text[end] == '\r')) ++end;
    const std::string run = text.substr(i, end - i);
    const size_t newlines = run.rfind("\n\n", 0) == 0 ? 2 : run[0] == '\n' ? 1 : 0;
    const bool ok = i > 0 && (run == " " || (newlines > 0 && run.size() <= newlines + 20 &&
                                             run.find_first_not_of(" \t", newlines) == std::string::npos));
    if (!ok) return false;
    i = end;
  }
  return true;
}

}  // namespace

TEST_CASE("json object matcher: documents nlohmann writes are taken whole, compact and pretty", "[structured]") {
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    json doc = json::object();
    for (int k = static_cast<int>(rng() % 5); k > 0; --k) doc["key" + std::to_string(k)] = random_value(rng, 1);
    for (const std::string& text : {doc.dump(), doc.dump(2), doc.dump(1, '\t')}) {
      INFO(text);
      CHECK(whole_object(text));
    }
  }
  CHECK(whole_object(R"({})"));
  CHECK(whole_object("{ \"a\" :\n\n\t[ 1 , -0.5e+3 , 0 , 1E9 , true , false , null , \"\\u00e9\\n\" , { } , [ ] ] }\n"));
  CHECK_FALSE(whole_object(" {}"));  // nothing before the root, as llama.cpp's root rule
  CHECK_FALSE(whole_object("{\n\n\n}"));  // at most two newlines
  CHECK(whole_object("{\"\xC3\xA9\xE4\xB8\x96\xF0\x9F\x98\x80\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}"));
}

TEST_CASE("json object matcher: what nlohmann refuses is refused - mutations of valid documents agree", "[structured]") {
  for (const std::string bad : {"[1]", "1", "\"a\"", "{\"a\":01}", "{\"a\":1,}", "{,}", "{\"a\" 1}", "{\"a\":tru}",
                                "{\"a\":\"\x01\"}", "{\"a\":\"\\q\"}", "{\"a\":\"\\u12G4\"}", "{\"a\":\"\xC0\x80\"}",
                                "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF5\x80\x80\x80\"}", "{\"a\":1}}", "{\"a\":-}",
                                "{\"a\":1.}", "{\"a\":1e}", "{\"a\":[1,]}", "{\"a\":[1}", "{a:1}", "{\"a\":+1}"}) {
    INFO(bad);
    CHECK_FALSE(whole_object(bad));
    CHECK(peer_object(bad) == false);
  }
  // Random single-byte changes, insertions and deletions of valid documents: the matcher takes a document whole and
  // complete exactly when nlohmann parses it as an object and its whitespace keeps to the gaps allowed.
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]:,\" \n\\ue1.-+0tfnrl\xC3\xA9\x80\xFF";
  int agreed = 0, valid = 0, compared = 0;
  for (int i = 0; i < 4000; ++i) {
    json doc = json::object();
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) doc["k" + std::to_string(k)] = random_value(rng, 2);
    std::string text = rng() % 2 ? doc.dump() : doc.dump(1);
    for (int edits = 1 + static_cast<int>(rng() % 2); edits > 0 && !text.empty(); --edits) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: text[at] = c; break;
        case 1: text.insert(text.begin() + static_cast<long>(at), c); break;
        default: text.erase(at, 1);
      }
    }
    std::optional<bool> peer = peer_object(text);
    if (!peer) continue;
    peer = *peer && gaps_allowed(text);
    INFO(json(text).dump(-1, ' ', true, json::error_handler_t::replace));
    CHECK(whole_object(text) == *peer);
    ++compared;
    agreed += whole_object(text) == *peer;
    valid += *peer;
  }
  CHECK(compared > 3900);
  CHECK(valid > 100);  // the mutations left enough valid documents to say something about acceptance
  CHECK(agreed == compared);
}

TEST_CASE("json object matcher: bounds on whitespace runs, number lengths and depth - a refused byte changes nothing",
          "[structured]") {
  CHECK(whole_object("{ }"));
  CHECK_FALSE(whole_object("{  }"));
  CHECK(whole_object("{\n" + std::string(20, ' ') + "}"));
  CHECK(whole_object("{\n\t\t \"a\":\n  1 }\n"));
  CHECK_FALSE(whole_object("{\n" + std::string(21, ' ') + "}"));
  CHECK(whole_object("{\n\n" + std::string(20, '\t') + "}"));
  CHECK_FALSE(whole_object("{\n\n" + std::string(21, '\t') + "}"));
  CHECK_FALSE(whole_object("{\n \n}"));
  CHECK_FALSE(whole_object("{ \n}"));
  CHECK(whole_object("{}\n\n"));
  CHECK_FALSE(whole_object("{}\n\n\n"));
  CHECK(whole_object("{\"a\":" + std::string(32, '1') + "}"));
  CHECK_FALSE(whole_object("{\"a\":" + std::string(33, '1') + "}"));
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonMatcher::kMaxDepth; ++i) deep += "[";
  CHECK(taken(deep) == deep.size());
  CHECK(taken(deep + "[") == deep.size());  // one level too deep
  JsonMatcher m;
  for (char c : std::string("{\"a\":1")) REQUIRE(m.feed(static_cast<uint8_t>(c)));
  const JsonMatcher before = m;
  CHECK_FALSE(m.feed(']'));
  CHECK(m.feed('}'));
  CHECK(m.complete());
  CHECK(m.feed(' '));
  CHECK_FALSE(m.feed('{'));  // one object only
  JsonMatcher again = before;
  CHECK(again.feed(','));
}

TEST_CASE("token bytes: a token's bytes in the middle of a text - SentencePiece and byte-level vocabularies",
          "[structured][tokenizer]") {
  auto stories = Tokenizer::load(test::stories_dir());
  REQUIRE(stories.ok());
  CHECK(stories->token_bytes(*stories->token_to_id("\xE2\x96\x81there")) == " there");
  CHECK(stories->token_bytes(*stories->token_to_id("<0x0A>")) == "\n");
  CHECK(stories->token_bytes(*stories->token_to_id("<0xE2>")) == "\xE2");  // a raw byte, not U+FFFD
  CHECK_FALSE(stories->token_bytes(1).has_value());                        // <s>: special
  CHECK_FALSE(stories->token_bytes(100000).has_value());
  auto gpt2 = Tokenizer::load(test::source_dir() / "tests/fixtures/tokenizers/gpt2");
  REQUIRE(gpt2.ok());
  CHECK(gpt2->token_bytes(*gpt2->token_to_id("\xC4\xA0the")) == " the");  // Ġthe
  // Every text's tokens' bytes, joined, are the text (both vocabularies; the text not starting with a space).
  for (const Tokenizer* tok : {&*stories, &*gpt2}) {
    for (const std::string text : {"Once upon a time, {\"a\": [1, 2]}", "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80 ok"}) {
      std::string joined;
      for (int32_t id : tok->encode(text, false)) joined += tok->token_bytes(id).value_or("?");
      CHECK(joined == (tok == &*stories ? " " + text : text));  // SentencePiece prepends its space
    }
  }
}

TEST_CASE("token masks: the ids whose bytes the matcher takes whole, stop ids once complete", "[structured]") {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  const auto vocab = structured::TokenVocabulary::from(*tok, 512);
  const std::vector<int32_t> stops{2};
  std::vector<uint64_t> bits;
  for (const std::string prefix : {"", "{", "{\"na", "{\"name\":", "{\"name\": \"Li", "{\"a\":12", "{\"a\":[1,", "{}"}) {
    INFO(prefix);
    JsonMatcher m;
    REQUIRE(taken(prefix, &m) == prefix.size());
    structured::allowed_tokens(m, vocab, stops, bits);
    const int count = test::check_mask_by_brute_force(bits, m, vocab, 2);
    CHECK(count > 0);
    if (prefix == "{}") CHECK(structured::allowed(bits, 2));
    if (prefix == "{\"name\": \"Li") CHECK(count > 350);  // inside a string most tokens go
  }
}

namespace {

std::vector<int32_t> story_prompt() {
  auto tok = Tokenizer::load(test::stories_dir());
  REQUIRE(tok.ok());
  return tok->encode("Once upon a time", true);
}

GenerateRequest json_request(uint32_t max_tokens, float temperature, uint64_t seed, float close_bias = 0.0f) {
  GenerateRequest r;
  r.prompt_ids = story_prompt();
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.response_format = ResponseFormat::json_object;
  if (close_bias != 0.0f) r.sampling.logit_bias = {{128, close_bias}};  // <0x7D>: "}"
  return r;
}

// Requests of json_object: greedy and seeded ones that run past max_tokens, and one whose "}" is favoured so that
// it closes its object and ends at a stop id.
std::vector<GenerateRequest> json_requests() {
  std::vector<GenerateRequest> requests{json_request(40, 0.0f, 0)};
  for (uint64_t seed = 1; seed <= 4; ++seed) requests.push_back(json_request(40, 0.8f, seed));
  requests.push_back(json_request(40, 0.0f, 0, 10.0f));
  requests.push_back(json_request(40, 0.9f, 9, 4.0f));
  return requests;
}

void check_json_outputs(const std::vector<GenerateOutput>& out, const std::vector<GenerateRequest>& requests) {
  REQUIRE(out.size() == requests.size());
  size_t closed = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("request " << i << ": " << out[i].text);
    REQUIRE_FALSE(out[i].error);
    JsonMatcher m;
    CHECK(taken(out[i].text, &m) == out[i].text.size());  // every output begins a JSON object
    if (out[i].finish_reason == "stop") {
      CHECK(m.complete());
      CHECK(json::parse(out[i].text).is_object());
      ++closed;
    } else {
      CHECK(out[i].finish_reason == "length");
      CHECK(out[i].generated_ids.size() == requests[i].max_tokens);
    }
  }
  CHECK(closed >= 1);
  CHECK(out[5].finish_reason == "stop");
}

}  // namespace

TEST_CASE("response_format json_object through the engine - JSON prefixes, closed objects end at a stop id - equal to "
          "solo runs under preemption, in a worker process, for forks",
          "[structured][engine]") {
  const std::vector<GenerateRequest> requests = json_requests();
  std::vector<GenerateOutput> solo;
  {
    auto engine = test::start_engine(test::quickstart());
    for (const GenerateRequest& r : requests) {
      auto out = engine->generate({r});
      REQUIRE(out.ok());
      solo.push_back((*out)[0]);
    }
    check_json_outputs(solo, requests);
    // Unconstrained, greedy tells the story instead.
    GenerateRequest plain = requests[0];
    plain.sampling.response_format = ResponseFormat::text;
    auto story = engine->generate({plain});
    REQUIRE(story.ok());
    CHECK((*story)[0].generated_ids != solo[0].generated_ids);
    // n = 2: each sample is the request seeded seed + i.
    GenerateRequest two = requests[1];
    two.sampling.n = 2;
    auto forked = engine->generate({two});
    REQUIRE(forked.ok());
    REQUIRE(forked->size() == 2);
    CHECK((*forked)[0].generated_ids == solo[1].generated_ids);
    CHECK((*forked)[1].generated_ids == solo[2].generated_ids);
    // A json_object that would ignore its end of sequence is refused.
    GenerateRequest endless = requests[0];
    endless.ignore_eos = true;
    auto refused = engine->generate({endless});
    REQUIRE(refused.ok());
    REQUIRE((*refused)[0].error);
    CHECK_THAT((*refused)[0].error->message, Catch::StartsWith("response_format: "));
  }
  SECTION("batched in a KV cache too small for them: preempted, recomputed, each grammar rebuilt from its tokens") {
    auto engine = test::start_engine(test::quickstart("configs/quickstart.yaml", {"engine.kv_cache_memory=80KiB"}));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    check_json_outputs(*out, requests);
    for (size_t i = 0; i < requests.size(); ++i) CHECK((*out)[i].generated_ids == solo[i].generated_ids);
    CHECK(engine->stats()->preemptions > 0);
  }
  SECTION("the worker in its own process: the response format crosses the process boundary") {
    auto engine = test::start_engine(test::quickstart("configs/quickstart-2proc.yaml"));
    auto out = engine->generate(requests);
    REQUIRE(out.ok());
    for (size_t i = 0; i < requests.size(); ++i) CHECK((*out)[i].generated_ids == solo[i].generated_ids);
  }
}
