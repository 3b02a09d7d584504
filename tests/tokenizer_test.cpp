// Tests for tokenizer/: actord::Tokenizer and actord::IncrementalDetokenizer against models/stories260K.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/token_texts.hpp"
#include "tokenizer/tokenizer.hpp"

#ifndef ACTORD_SOURCE_DIR
#error "ACTORD_SOURCE_DIR (the repository root, a string literal) must be defined"
#endif

using namespace std::string_literals;
namespace fs = std::filesystem;

namespace {

const fs::path kModelDir = fs::path(ACTORD_SOURCE_DIR) / "models/stories260K";

struct EncodeCase {
  std::string text;
  std::vector<int32_t> ids;  // encode(text), add_special_tokens = true
  std::string decoded;       // decode(ids), skip_special_tokens = true
  std::string decoded_keep;  // decode(ids), skip_special_tokens = false
};

// Expected values below came from HF tokenizers 0.22.2 (Rust) via the npm package @anush008/tokenizers 0.6.0:
// Tokenizer.fromFile(tokenizer.json), encode(text, null, {addSpecialTokens}), decode(ids, skipSpecialTokens).
// kStoriesCases: models/stories260K/tokenizer.json as is. kMetaspaceCases / kLowercaseCases: the variants that
// make_metaspace_variant / make_lowercase_variant below write.
const std::vector<EncodeCase> kStoriesCases = {
    {"Once upon a time"s, {1, 403, 407, 261, 378}, "Once upon a time"s, "<s> Once upon a time"s},
    {""s, {1}, ""s, "<s>"s},
    {" "s, {1, 410, 410}, " "s, "<s>  "s},
    {"  leading and trailing  "s, {1, 410, 410, 278, 411, 380, 299, 269, 259, 420, 412, 290, 299, 410, 410}, "  leading and trailing  "s, "<s>   leading and trailing  "s},
    {"Hello, world! How are you?"s, {1, 346, 306, 414, 432, 263, 304, 341, 443, 320, 327, 261, 276, 364, 450}, "Hello, world! How are you?"s, "<s> Hello, world! How are you?"s},
    {"line one\nline two\n\nend"s, {1, 278, 271, 411, 353, 411, 13, 421, 271, 411, 259, 424, 414, 13, 13, 367}, "line one\nline two\n\nend"s, "<s> line one\nline two\n\nend"s},
    {"tabs\tand\r\nCRLF"s, {1, 259, 412, 430, 419, 12, 412, 264, 16, 13, 457, 461, 438, 453}, "tabs\tand\r\nCRLF"s, "<s> tabs\tand\r\nCRLF"s},
    {"héllo 世界 😀"s, {1, 270, 485, 306, 414, 410, 231, 187, 153, 234, 152, 143, 410, 243, 162, 155, 131}, "héllo 世界 😀"s, "<s> héllo 世界 😀"s},
    {"a<s>b"s, {1, 261, 1, 268}, "a b"s, "<s> a<s> b"s},
    {"Hello <s> world </s> end"s, {1, 346, 306, 414, 410, 1, 410, 263, 304, 341, 410, 2, 410, 344, 264}, "Hello   world   end"s, "<s> Hello <s>  world </s>  end"s},
    {"<s>"s, {1, 1}, ""s, "<s><s>"s},
    {"<unk>x"s, {1, 0, 410, 444}, "x"s, "<s><unk> x"s},
    {"The quick brown fox jumps over the lazy dog."s, {1, 291, 410, 456, 425, 417, 340, 268, 420, 327, 416, 272, 414, 444, 410, 449, 425, 423, 427, 419, 334, 330, 265, 278, 412, 451, 422, 400, 428, 426}, "The quick brown fox jumps over the lazy dog."s, "<s> The quick brown fox jumps over the lazy dog."s},
    {"Lily and Tom went to the park. They saw a big dog!"s, {1, 317, 269, 274, 287, 263, 377, 267, 265, 282, 295, 433, 426, 342, 394, 261, 370, 400, 428, 443}, "Lily and Tom went to the park. They saw a big dog!"s, "<s> Lily and Tom went to the park. They saw a big dog!"s},
    {"1234567890 +-*/=%"s, {1, 410, 475, 479, 472, 484, 480, 490, 491, 487, 483, 477, 410, 496, 464, 497, 492, 64, 501}, "1234567890 +-*/=%"s, "<s> 1234567890 +-*/=%"s},
    {"ünïcödé ñ ç"s, {1, 410, 198, 191, 416, 198, 178, 429, 198, 185, 418, 485, 410, 493, 410, 198, 170}, "ünïcödé ñ ç"s, "<s> ünïcödé ñ ç"s},
    {"" "\x00" "" "\x01" " zero"s, {1, 410, 3, 4, 410, 451, 285, 414}, "" "\x00" "" "\x01" " zero"s, "<s> " "\x00" "" "\x01" " zero"s},
    {"emoji 👨‍👩‍👧 family"s, {1, 344, 423, 414, 449, 417, 410, 243, 162, 148, 171, 229, 131, 144, 243, 162, 148, 172, 229, 131, 144, 243, 162, 148, 170, 272, 314, 310}, "emoji 👨‍👩‍👧 family"s, "<s> emoji 👨‍👩‍👧 family"s},
    {"<0x41>"s, {1, 410, 504, 477, 444, 484, 475, 505}, "<0x41>"s, "<s> <0x41>"s},
    {"▁already▁meta"s, {1, 410, 261, 421, 276, 380, 422, 284, 316, 412}, " already meta"s, "<s>  already meta"s},
};

const std::vector<EncodeCase> kMetaspaceCases = {
    {"Once upon a time"s, {1, 403, 407, 261, 378}, "Once upon a time"s, "<s> Once upon a time"s},
    {" Once  upon"s, {1, 403, 410, 407}, "Once  upon"s, "<s> Once  upon"s},
    {""s, {1}, ""s, "<s>"s},
    {"   "s, {1, 410, 410, 410}, "  "s, "<s>   "s},
    {"a[L]b  [L] c"s, {1, 261, 512, 430, 512, 280}, "ab c"s, "<s> a[L]b[L] c"s},
    {"x [R]   y [R]x z"s, {1, 410, 444, 410, 513, 422, 410, 516, 410, 451}, "x [R]y [R]x z"s, "<s> x [R]y [R]x z"s},
    {"cat catalog the cat. bobcat"s, {1, 514, 280, 294, 412, 421, 414, 428, 265, 410, 514, 426, 268, 414, 430, 429, 294}, "cat catalog the cat. bobcat"s, "<s>cat catalog the cat. bobcat"s},
    {"hot dog dogs"s, {1, 270, 309, 410, 515, 410, 515, 419}, "hot dog dogs"s, "<s> hot dog dogs"s},
    {"[L]start"s, {1, 512, 356, 295, 413}, "start"s, "<s>[L]start"s},
    {"HÉLLO World ÀÉÎ ΑΒΓ Привет"s, {1, 320, 198, 140, 438, 438, 441, 410, 448, 304, 341, 410, 198, 131, 198, 140, 198, 145, 410, 209, 148, 209, 149, 209, 150, 410, 211, 162, 212, 131, 211, 187, 211, 181, 211, 184, 212, 133}, "HÉLLO World ÀÉÎ ΑΒΓ Привет"s, "<s> HÉLLO World ÀÉÎ ΑΒΓ Привет"s},
    {"  Strip me  "s, {1, 410, 301, 413, 325, 427, 284, 411, 410, 410}, " Strip me  "s, "<s>  Strip me  "s},
    {"héllo 世界 😀 ∑∑"s, {1, 270, 485, 306, 414, 410, 231, 187, 153, 234, 152, 143, 410, 243, 162, 155, 131, 410, 229, 139, 148, 229, 139, 148}, "héllo 世界 😀 ∑∑"s, "<s> héllo 世界 😀 ∑∑"s},
    {"emoji 👨‍👩‍👧 family"s, {1, 344, 423, 414, 449, 417, 410, 243, 162, 148, 171, 229, 131, 144, 243, 162, 148, 172, 229, 131, 144, 243, 162, 148, 170, 272, 314, 310}, "emoji 👨‍👩‍👧 family"s, "<s> emoji 👨‍👩‍👧 family"s},
    {"line\nbreak"s, {1, 278, 271, 411, 13, 430, 276, 412, 433}, "line\nbreak"s, "<s> line\nbreak"s},
    {"Hello <s> world </s>"s, {1, 346, 306, 414, 410, 1, 263, 304, 341, 410, 2}, "Hello  world "s, "<s> Hello <s> world </s>"s},
};

const std::vector<EncodeCase> kLowercaseCases = {
    {"Once upon a time"s, {1, 353, 331, 407, 261, 378, 2}, "once upon a time"s, "<s> once upon a time</s>"s},
    {" Once  upon"s, {1, 353, 331, 410, 407, 2}, "once  upon"s, "<s> once  upon</s>"s},
    {""s, {1, 2}, ""s, "<s></s>"s},
    {"   "s, {1, 2}, ""s, "<s></s>"s},
    {"a[L]b  [L] c"s, {1, 261, 508, 421, 509, 430, 410, 410, 508, 421, 509, 280, 2}, "a[l]b  [l] c"s, "<s> a[l]b  [l] c</s>"s},
    {"x [R]   y [R]x z"s, {1, 410, 444, 410, 508, 420, 509, 410, 410, 348, 410, 508, 420, 509, 444, 410, 451, 2}, "x [r]   y [r]x z"s, "<s> x [r]   y [r]x z</s>"s},
    {"cat catalog the cat. bobcat"s, {1, 280, 294, 280, 294, 412, 421, 414, 428, 265, 280, 294, 426, 268, 414, 430, 429, 294, 2}, "cat catalog the cat. bobcat"s, "<s> cat catalog the cat. bobcat</s>"s},
    {"hot dog dogs"s, {1, 270, 309, 400, 428, 400, 428, 419, 2}, "hot dog dogs"s, "<s> hot dog dogs</s>"s},
    {"[L]start"s, {1, 410, 508, 421, 509, 356, 295, 413, 2}, "[l]start"s, "<s> [l]start</s>"s},
    {"HÉLLO World ÀÉÎ ΑΒΓ Привет"s, {1, 270, 485, 306, 414, 263, 304, 341, 410, 0, 485, 0, 410, 0, 0, 0, 410, 0, 0, 0, 0, 0, 0, 2}, "héllo world é  "s, "<s> héllo world <unk>é<unk> <unk><unk><unk> <unk><unk><unk><unk><unk><unk></s>"s},
    {"  Strip me  "s, {1, 349, 325, 427, 284, 411, 410, 410, 2}, "strip me  "s, "<s> strip me  </s>"s},
    {"héllo 世界 😀 ∑∑"s, {1, 270, 485, 306, 414, 410, 0, 0, 410, 0, 410, 0, 0, 2}, "héllo   "s, "<s> héllo <unk><unk> <unk> <unk><unk></s>"s},
    {"emoji 👨‍👩‍👧 family"s, {1, 344, 423, 414, 449, 417, 410, 0, 0, 0, 0, 0, 272, 314, 310, 2}, "emoji  family"s, "<s> emoji <unk><unk><unk><unk><unk> family</s>"s},
    {"line\nbreak"s, {1, 278, 271, 411, 0, 430, 276, 412, 433, 2}, "linebreak"s, "<s> line<unk>break</s>"s},
    {"Hello <s> world </s>"s, {1, 281, 306, 414, 410, 1, 263, 304, 341, 410, 2, 2}, "hello  world "s, "<s> hello <s> world </s></s>"s},
};


std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json stories_tokenizer_json() { return nlohmann::json::parse(read_file(kModelDir / "tokenizer.json")); }

// A fresh empty folder under the temp dir; removed by the destructor.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    std::random_device rd;
    path = fs::temp_directory_path() / ("actord_tokenizer_test_" + name + "_" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path / file, std::ios::binary) << text; }
};

// Writes stories260K's tokenizer.json changed by `mutate` into `dir`.
void write_variant(const TempDir& dir, const std::function<void(nlohmann::json&)>& mutate) {
  nlohmann::json t = stories_tokenizer_json();
  mutate(t);
  dir.write("tokenizer.json", t.dump());
}

nlohmann::json added(int id, const char* content, bool special, bool lstrip, bool rstrip, bool single_word,
                     bool normalized) {
  return {{"id", id},         {"content", content},         {"special", special},      {"lstrip", lstrip},
          {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}};
}

// Metaspace pre-tokenizer (prepend_scheme first), no normalizer, ByteFallback + Metaspace decoder, merges as
// "a b" strings, and added tokens with lstrip / rstrip / single_word / normalized flags.
void make_metaspace_variant(nlohmann::json& t) {
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}};
  t["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "ByteFallback"}},
                    {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}}}}};
  t["added_tokens"].push_back(added(512, "[L]", true, true, false, false, false));
  t["added_tokens"].push_back(added(513, "[R]", false, false, true, false, false));
  t["added_tokens"].push_back(added(514, "cat", false, false, false, true, false));
  t["added_tokens"].push_back(added(515, "dog", false, false, false, false, true));
  t["added_tokens"].push_back(added(516, "[R]x", false, false, false, false, false));
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : t["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  t["model"]["merges"] = merges;
}

// Strip(left) + Lowercase normalizers, Metaspace (always, no split) in a Sequence, no byte fallback (unknown
// characters become <unk>, not fused), and a template adding <s> ... </s>.
void make_lowercase_variant(nlohmann::json& t) {
  t["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, {{"type", "Lowercase"}}}}};
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", false}}}}};
  t["model"]["byte_fallback"] = false;
  t["model"]["fuse_unk"] = false;
  t["post_processor"]["single"] = nlohmann::json::parse(
      R"([{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
          {"SpecialToken": {"id": "</s>", "type_id": 0}}])");
  t["post_processor"]["special_tokens"]["</s>"] = {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}};
}

void check_cases(const actord::Tokenizer& tok, const std::vector<EncodeCase>& cases) {
  for (const EncodeCase& c : cases) {
    INFO("text: " << c.text);
    CHECK(tok.encode(c.text) == c.ids);
    CHECK(tok.decode(c.ids) == c.decoded);
    CHECK(tok.decode(c.ids, false) == c.decoded_keep);
  }
}

actord::Tokenizer load_stories() {
  auto tok = actord::Tokenizer::load(kModelDir);
  if (!tok.ok()) FAIL("load failed: " << tok.error().message);
  return std::move(tok).value();
}

std::vector<int32_t> reference_ids() {
  auto j = nlohmann::json::parse(read_file(kModelDir / "reference_greedy_256.json"));
  return j.at("generated_ids").get<std::vector<int32_t>>();
}

bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Pushes `ids` in the chunks given by `cuts` (ascending split points) and returns the concatenated text; every
// chunk's text must be valid UTF-8 on its own.
std::string stream(const actord::Tokenizer& tok, const std::vector<int32_t>& ids, const std::vector<std::size_t>& cuts,
                   bool skip_special = true) {
  actord::IncrementalDetokenizer detok(tok, skip_special);
  std::string out;
  std::size_t begin = 0;
  for (std::size_t k = 0; k <= cuts.size(); ++k) {
    const std::size_t end = k < cuts.size() ? cuts[k] : ids.size();
    const std::string piece = detok.push(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
    CHECK(valid_utf8(piece));
    out += piece;
    begin = end;
  }
  const std::string tail = detok.finish();
  CHECK(valid_utf8(tail));
  return out + tail;
}

}  // namespace

TEST_CASE("stories260K tokenizer metadata", "[tokenizer]") {
  const auto tok = load_stories();
  CHECK(tok.vocab_size() == 512);
  CHECK(tok.bos_id() == std::optional<int32_t>(1));
  CHECK(tok.stop_ids() == std::vector<int32_t>{1, 2});  // generation_config.json eos_token_id
  CHECK(tok.token_to_id("<s>") == std::optional<int32_t>(1));
  CHECK(tok.token_to_id("</s>") == std::optional<int32_t>(2));
  CHECK(tok.token_to_id("\u2581the") == std::optional<int32_t>(265));
  CHECK_FALSE(tok.token_to_id("no such token").has_value());
  CHECK(tok.is_special(0));
  CHECK(tok.is_special(1));
  CHECK(tok.is_special(2));
  CHECK_FALSE(tok.is_special(403));
  CHECK(tok.is_byte_token(13));  // <0x0A>
  CHECK_FALSE(tok.is_byte_token(403));
}

TEST_CASE("stories260K encode and decode match HF tokenizers", "[tokenizer]") {
  const auto tok = load_stories();
  CHECK(tok.encode("Once upon a time") == std::vector<int32_t>{1, 403, 407, 261, 378});
  CHECK(tok.encode("Once upon a time", false) == std::vector<int32_t>{403, 407, 261, 378});
  check_cases(tok, kStoriesCases);
  for (const EncodeCase& c : kStoriesCases) {  // the template only adds the leading <s>
    std::vector<int32_t> plain(c.ids.begin() + 1, c.ids.end());
    CHECK(tok.encode(c.text, false) == plain);
  }
  CHECK(tok.decode({1, 403, 99999, -5, 407}) == "Once upon");  // unknown ids are dropped
}

TEST_CASE("plain text round trips", "[tokenizer]") {
  const auto tok = load_stories();
  for (const std::string& text :
       {"Once upon a time, there was a little girl named Lily."s, "  two leading, two trailing  "s, "a\n\nb\tc"s,
        "héllo 世界 😀"s, "ünïcödé ñ ç — “quotes” ∑"s, "x"s, ""s, "  "s, "emoji 👨‍👩‍👧 family"s}) {
    INFO("text: " << text);
    CHECK(tok.decode(tok.encode(text)) == text);
    CHECK(tok.decode(tok.encode(text, false)) == text);
  }
}

TEST_CASE("reference greedy output decodes to reference_greedy_256.txt", "[tokenizer]") {
  const auto tok = load_stories();
  const std::vector<int32_t> ids = reference_ids();
  REQUIRE(ids.size() == 256);
  const std::string txt = read_file(kModelDir / "reference_greedy_256.txt");
  // The .txt file is the decoded text followed by one newline (the ids end with "." , id 426).
  REQUIRE(txt.size() == 566);
  REQUIRE(txt.back() == '\n');
  const std::string text = tok.decode(ids);
  CHECK(text == txt.substr(0, txt.size() - 1));
  CHECK(text.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
  std::vector<int32_t> with_bos{1};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  CHECK(tok.decode(with_bos) == text);
  CHECK(tok.encode(text) == with_bos);  // BPE gives back exactly the generated ids
}

TEST_CASE("incremental detokenizer equals decode for every split", "[tokenizer]") {
  const auto tok = load_stories();
  std::vector<int32_t> ids{1};  // BOS (special, skipped) as the engine's sequence would start
  const auto gen = reference_ids();
  ids.insert(ids.end(), gen.begin(), gen.end());
  const std::string expected = tok.decode(ids);

  for (std::size_t k = 0; k <= ids.size(); ++k) CHECK(stream(tok, ids, {k}) == expected);

  std::vector<std::size_t> every;  // one token per push
  for (std::size_t k = 1; k < ids.size(); ++k) every.push_back(k);
  CHECK(stream(tok, ids, every) == expected);

  const std::vector<std::size_t> uneven{1, 2, 5, 6, 30, 61, 62, 63, 131, 132, 200};
  CHECK(stream(tok, ids, uneven) == expected);
  CHECK(stream(tok, ids, uneven, false) == tok.decode(ids, false));
}

TEST_CASE("incremental detokenizer after a context gives what the tokens add to it - leading space kept",
          "[tokenizer]") {
  const auto tok = load_stories();
  const std::vector<int32_t> prompt = tok.encode("Once upon a time,");  // BOS first: skipped as context
  const std::vector<int32_t> story = tok.encode("there was a little girl named Lily", false);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), story.begin(), story.end());
  const std::string prompt_text = tok.decode(prompt);
  const std::string added = tok.decode(all).substr(prompt_text.size());
  REQUIRE(added == " there was a little girl named Lily");
  CHECK(tok.decode(story) == "there was a little girl named Lily");  // alone: the space stripped at the start
  for (std::size_t k = 0; k <= story.size(); ++k) {
    actord::IncrementalDetokenizer detok(tok, true, prompt);
    std::string out = detok.push({story.begin(), story.begin() + long(k)});
    for (std::size_t t = k; t < story.size(); ++t) out += detok.push({story[t]});
    out += detok.finish();
    CHECK(out == added);
  }
  {  // the first token's own text
    actord::IncrementalDetokenizer detok(tok, true, prompt);
    CHECK(detok.push({story[0]}) == " there");
  }
  {  // a context longer than the detokenizer reads (its last kContextReach ids): the same text after it
    std::vector<int32_t> long_prompt{1};
    const auto ref = reference_ids();
    for (int twice = 0; twice < 2; ++twice) long_prompt.insert(long_prompt.end(), ref.begin(), ref.end());
    REQUIRE(long_prompt.size() > actord::IncrementalDetokenizer::kContextReach);
    std::vector<int32_t> whole = long_prompt;
    whole.insert(whole.end(), story.begin(), story.end());
    actord::IncrementalDetokenizer detok(tok, true, long_prompt);
    std::string out;
    for (int32_t id : story) out += detok.push({id});
    CHECK(out + detok.finish() == tok.decode(whole).substr(tok.decode(long_prompt).size()));
  }
  {  // a context of BOS only (nothing once skipped): the text's start, as decode gives it
    const std::vector<int32_t> bos{1};
    actord::IncrementalDetokenizer detok(tok, true, bos);
    CHECK(detok.push(story) + detok.finish() == tok.decode(story));
  }
  {  // a context ending inside a character (two of the emoji's four byte tokens): the ids' own text, whole
    const std::vector<int32_t> cut{403, 410, 243, 162};
    actord::IncrementalDetokenizer detok(tok, true, cut);
    CHECK(detok.push({155, 131, 407}) + detok.finish() == tok.decode({155, 131, 407}));
  }
}

std::string show_texts(const actord::TokenTexts& texts) {
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i) out += "[" + texts.text(i) + "]";
  return out;
}

TEST_CASE("token texts: what each token adds - they add up to the text, offsets index it, names for specials",
          "[tokenizer]") {
  const auto tok = load_stories();
  const std::vector<int32_t> prompt = tok.encode("Once upon a time,");
  // " there was 😀 ok" then the end of sequence: the emoji is four byte tokens.
  std::vector<int32_t> gen = tok.encode("there was \xF0\x9F\x98\x80 ok", false);
  gen.push_back(2);  // </s>
  actord::TokenTexts texts(tok, prompt);
  texts.extend(std::span<const int32_t>(gen).first(3), false);
  texts.extend(std::span<const int32_t>(gen).subspan(3), true);
  REQUIRE(texts.size() == gen.size());
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  const std::string text = tok.decode(all).substr(tok.decode(prompt).size());
  CHECK(text == " there was \xF0\x9F\x98\x80 ok");
  std::string joined;
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("token " << i << " '" << texts.text(i) << "' at " << texts.offset(i));
    if (gen[i] == 2) {
      CHECK(texts.text(i) == "</s>");  // by name, adding nothing to the text
      CHECK(texts.offset(i) == text.size());
      continue;
    }
    CHECK(texts.offset(i) == joined.size());
    CHECK(text.compare(texts.offset(i), texts.text(i).size(), texts.text(i)) == 0);
    joined += texts.text(i);
  }
  CHECK(joined == text);
  CHECK(texts.text(0) == " there");
  // The emoji's four byte tokens show nothing (a byte run may go on), the token after them the whole character
  // with its own text, as the streamed text gives them.
  size_t empty = 0;
  for (size_t i = 0; i < texts.size(); ++i) empty += texts.text(i).empty();
  INFO(show_texts(texts));
  CHECK(empty == 4);
  CHECK(texts.text(gen.size() - 3) == "\xF0\x9F\x98\x80 o");
  // An alternative's text after the ids before it.
  CHECK(actord::TokenTexts::after(tok, prompt, *tok.token_to_id("\xE2\x96\x81there")) == " there");
  CHECK(actord::TokenTexts::after(tok, {}, *tok.token_to_id("\xE2\x96\x81there")) == "there");
  CHECK(actord::TokenTexts::after(tok, prompt, 2) == "</s>");
}

TEST_CASE("incremental detokenizer never splits a character", "[tokenizer]") {
  const auto tok = load_stories();
  // "héllo 世界 😀" ends with 😀 as four byte-fallback tokens <0xF0> <0x9F> <0x98> <0x80>.
  const std::vector<int32_t> ids = tok.encode("héllo 世界 😀 ok");
  const std::string expected = tok.decode(ids);
  REQUIRE(expected == "héllo 世界 😀 ok");
  {
    actord::IncrementalDetokenizer detok(tok);
    std::string out;
    for (int32_t id : ids) {
      const std::string piece = detok.push({id});
      CHECK(valid_utf8(piece));
      out += piece;
    }
    out += detok.finish();
    CHECK(out == expected);
  }
  for (std::size_t a = 0; a <= ids.size(); ++a) {
    for (std::size_t b = a; b <= ids.size(); ++b) CHECK(stream(tok, ids, {a, b}) == expected);
  }
  {  // the emoji bytes pushed one by one hold everything back until the character is complete
    actord::IncrementalDetokenizer detok(tok);
    CHECK(detok.push({403}) == "Once");
    CHECK(detok.push({410}) == " ");
    CHECK(detok.push({243}).empty());
    CHECK(detok.push({162}).empty());
    CHECK(detok.push({155}).empty());
    CHECK(detok.push({131}).empty());
    CHECK(detok.push({407}) == "😀 upon");
    CHECK(detok.finish().empty());
  }
  {  // a truncated character at the end comes out of finish() as U+FFFD per byte, as decode does
    const std::vector<int32_t> cut{403, 410, 243, 162};
    actord::IncrementalDetokenizer detok(tok);
    std::string out = detok.push(cut);
    out += detok.finish();
    CHECK(out == tok.decode(cut));
    CHECK(out == "Once \xEF\xBF\xBD\xEF\xBF\xBD");
  }
  {  // invalid bytes in the middle: same U+FFFD as decode
    const std::vector<int32_t> bad{403, 243, 162, 407, 131, 261};
    for (std::size_t k = 0; k <= bad.size(); ++k) CHECK(stream(tok, bad, {k}) == tok.decode(bad));
    std::vector<std::size_t> every{1, 2, 3, 4, 5};
    CHECK(stream(tok, bad, every) == tok.decode(bad));
  }
}

TEST_CASE("Metaspace pre-tokenizer and added-token flags match HF tokenizers", "[tokenizer]") {
  TempDir dir("metaspace");
  write_variant(dir, make_metaspace_variant);
  auto tok = actord::Tokenizer::load(dir.path);
  REQUIRE(tok.ok());
  CHECK(tok->vocab_size() == 517);
  check_cases(*tok, kMetaspaceCases);
  // No tokenizer_config.json / generation_config.json: no bos, no stop ids, template still adds <s>.
  CHECK_FALSE(tok->bos_id().has_value());
  CHECK(tok->stop_ids().empty());
}

TEST_CASE("Strip and Lowercase normalizers - unk without byte fallback match HF tokenizers", "[tokenizer]") {
  TempDir dir("lowercase");
  write_variant(dir, make_lowercase_variant);
  auto tok = actord::Tokenizer::load(dir.path);
  REQUIRE(tok.ok());
  check_cases(*tok, kLowercaseCases);
}

TEST_CASE("tokenizer_config add_bos_token / add_eos_token apply without a post_processor", "[tokenizer]") {
  TempDir dir("config");
  write_variant(dir, [](nlohmann::json& t) { t["post_processor"] = nullptr; });
  dir.write("tokenizer_config.json",
            R"({"add_bos_token": true, "add_eos_token": true, "bos_token": "<s>",
                "eos_token": {"content": "</s>", "special": true}})");
  auto tok = actord::Tokenizer::load(dir.path);
  REQUIRE(tok.ok());
  CHECK(tok->encode("Once upon a time") == std::vector<int32_t>{1, 403, 407, 261, 378, 2});
  CHECK(tok->encode("Once upon a time", false) == std::vector<int32_t>{403, 407, 261, 378});
  CHECK(tok->bos_id() == std::optional<int32_t>(1));
  CHECK(tok->stop_ids() == std::vector<int32_t>{2});  // no generation_config.json: the eos token

  dir.write("generation_config.json", R"({"eos_token_id": 1})");
  auto tok2 = actord::Tokenizer::load(dir.path);
  REQUIRE(tok2.ok());
  CHECK(tok2->stop_ids() == std::vector<int32_t>{1});
}

TEST_CASE("tokenizer load errors", "[tokenizer]") {
  using actord::Errc;
  SECTION("missing folder") {
    const fs::path missing = fs::path(ACTORD_SOURCE_DIR) / "models/no_such_model_here";
    auto tok = actord::Tokenizer::load(missing);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.error().code == Errc::not_found);
    CHECK_THAT(tok.error().message, Catch::Contains((missing / "tokenizer.json").string()));
  }
  SECTION("malformed tokenizer.json") {
    TempDir dir("malformed");
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, )");
    auto tok = actord::Tokenizer::load(dir.path);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.error().code == Errc::parse_error);
    CHECK_THAT(tok.error().message, Catch::Contains("tokenizer.json"));
  }
  SECTION("malformed tokenizer_config.json") {
    TempDir dir("badconfig");
    write_variant(dir, [](nlohmann::json&) {});
    dir.write("tokenizer_config.json", "{not json");
    auto tok = actord::Tokenizer::load(dir.path);
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.error().code == Errc::parse_error);
    CHECK_THAT(tok.error().message, Catch::Contains("tokenizer_config.json"));
  }
  SECTION("unsupported pieces name the type") {
    struct Bad {
      const char* field;
      nlohmann::json value;
      std::string message;
    };
    const std::vector<Bad> bads = {
        {"normalizer", {{"type", "BertNormalizer"}}, "tokenizer.json: normalizer type 'BertNormalizer' is not supported"},
        {"normalizer",
         {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}, {{"type", "Precompiled"}}}}},
         "tokenizer.json: normalizer type 'Precompiled' is not supported"},
        {"pre_tokenizer", {{"type", "Whitespace"}}, "tokenizer.json: pre_tokenizer type 'Whitespace' is not supported"},
        {"decoder", {{"type", "WordPiece"}}, "tokenizer.json: decoder type 'WordPiece' is not supported"},
        {"post_processor", {{"type", "RobertaProcessing"}},
         "tokenizer.json: post_processor type 'RobertaProcessing' is not supported"},
        {"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}},
         "tokenizer.json: model type 'Unigram' is not supported"},
    };
    for (const Bad& bad : bads) {
      TempDir dir("unsupported");
      write_variant(dir, [&](nlohmann::json& t) { t[bad.field] = bad.value; });
      auto tok = actord::Tokenizer::load(dir.path);
      REQUIRE_FALSE(tok.ok());
      CHECK(tok.error().code == Errc::unsupported);
      CHECK(tok.error().message == bad.message);
    }
  }
}
