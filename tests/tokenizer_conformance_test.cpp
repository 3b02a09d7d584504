// Conformance of actord::Tokenizer with HF tokenizers (Rust) on real byte-level and SentencePiece-style BPE tokenizers.
//
// Fixtures: tests/fixtures/tokenizers/ (see NOTICE.md and make_fixtures.js there). corpus.json is a list of
// strings; each <name>/ folder holds tokenizer.json (+ tokenizer_config.json) and expected.json =
// {"ids": [[...] per string], "decoded": [...]}, computed with HF tokenizers 0.22 via @anush008/tokenizers 0.6.0
// (encode with add_special_tokens = true, decode with skip_special_tokens = false).
// variants.json lists patched copies of the GPT-2 tokenizer (other normalizers / pre-tokenizers / decoders); the
// test writes each patched tokenizer.json to a temporary folder and checks it against variants/<name>/expected.json.
// stories260K/expected.json is checked against the embedded model's own tokenizer (models/stories260K).
// Extra fixture folders laid out the same way (e.g. Llama 3 and Llama 2, whose tokenizer.json cannot be committed) are
// checked too when the environment variable ACTORD_TOKENIZER_CONFORMANCE_EXTRA names their parent folder.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

#ifndef ACTORD_SOURCE_DIR
#error "ACTORD_SOURCE_DIR (the repository root, a string literal) must be defined"
#endif

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(ACTORD_SOURCE_DIR) / "tests/fixtures/tokenizers";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Printable form of a string for failure messages (non-ASCII and control bytes as \xNN).
std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out.size() > 300 ? out.substr(0, 300) + "..." : out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size() && i < 64; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + (ids.size() > 64 ? ",...]" : "]");
}

bool is_valid_utf8_prefix_cut(const std::string& s) {
  // True when `s` does not end inside a UTF-8 character.
  std::size_t i = s.size();
  std::size_t cont = 0;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80 && cont < 4) {
    --i;
    ++cont;
  }
  if (i == 0) return cont == 0;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const std::size_t need = lead < 0x80 ? 0 : lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  return need == cont;
}

void check_fixture(const fs::path& dir, const std::vector<std::string>& corpus,
                   const fs::path& expected_dir = fs::path()) {
  INFO("fixture " << dir.string());
  auto loaded = actord::Tokenizer::load(dir);
  if (!loaded.ok()) FAIL("load failed: " << loaded.error().message);
  const actord::Tokenizer& tok = *loaded;
  const nlohmann::json expected = read_json((expected_dir.empty() ? dir : expected_dir) / "expected.json");
  const auto& ids = expected.at("ids");
  const auto& decoded = expected.at("decoded");
  REQUIRE(ids.size() == corpus.size());
  REQUIRE(decoded.size() == corpus.size());

  std::size_t id_mismatches = 0, decode_mismatches = 0, stream_mismatches = 0, stream_cuts = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<int32_t> want = ids[i].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(corpus[i], /*add_special_tokens=*/true);
    if (got != want) {
      if (++id_mismatches <= 10) {
        UNSCOPED_INFO("encode #" << i << " '" << show(corpus[i]) << "': got " << show(got) << " want " << show(want));
      }
    }
    const std::string want_text = decoded[i].get<std::string>();
    const std::string got_text = tok.decode(want, /*skip_special_tokens=*/false);
    if (got_text != want_text) {
      if (++decode_mismatches <= 10) {
        UNSCOPED_INFO("decode #" << i << ": got '" << show(got_text) << "' want '" << show(want_text) << "'");
      }
    }
    // Streaming: one id at a time; every delta ends on a character boundary and the deltas add up to decode.
    if (i % 3 == 0) {
      actord::IncrementalDetokenizer detok(tok, /*skip_special_tokens=*/false);
      std::string streamed;
      for (int32_t id : want) {
        const std::string delta = detok.push({id});
        if (!is_valid_utf8_prefix_cut(delta)) ++stream_cuts;
        streamed += delta;
      }
      streamed += detok.finish();
      if (streamed != want_text) {
        if (++stream_mismatches <= 10) {
          UNSCOPED_INFO("stream #" << i << ": got '" << show(streamed) << "' want '" << show(want_text) << "'");
        }
      }
    }
    // Streaming after a context (the prompt): the second half's deltas add up to what it adds to the first half's
    // text, wherever the whole's decode extends the first half's (not where a character spans the cut).
    if (i % 3 == 1 && want.size() >= 2) {
      const std::vector<int32_t> context(want.begin(), want.begin() + long(want.size() / 2));
      const std::string context_text = tok.decode(context, false);
      if (want_text.compare(0, context_text.size(), context_text) == 0 && !context_text.ends_with("\xEF\xBF\xBD")) {
        actord::IncrementalDetokenizer detok(tok, /*skip_special_tokens=*/false, context);
        std::string streamed;
        for (size_t t = context.size(); t < want.size(); ++t) streamed += detok.push({want[t]});
        streamed += detok.finish();
        if (streamed != want_text.substr(context_text.size()) && ++stream_mismatches <= 10) {
          UNSCOPED_INFO("stream after context #" << i << ": got '" << show(streamed) << "' want '"
                                                 << show(want_text.substr(context_text.size())) << "'");
        }
      }
    }
  }
  INFO(corpus.size() << " strings: " << id_mismatches << " id mismatches, " << decode_mismatches
                     << " decode mismatches, " << stream_mismatches << " streaming mismatches, " << stream_cuts
                     << " deltas cut inside a character");
  CHECK(id_mismatches == 0);
  CHECK(decode_mismatches == 0);
  CHECK(stream_mismatches == 0);
  CHECK(stream_cuts == 0);
}

std::vector<std::string> load_corpus() {
  return read_json(kFixtures / "corpus.json").get<std::vector<std::string>>();
}

}  // namespace

TEST_CASE("real tokenizers match HF tokenizers on the corpus", "[tokenizer][conformance]") {
  const std::vector<std::string> corpus = load_corpus();
  REQUIRE(corpus.size() >= 1000);
  SECTION("gpt2") { check_fixture(kFixtures / "gpt2", corpus); }
  SECTION("qwen3") { check_fixture(kFixtures / "qwen3", corpus); }
  SECTION("stories260K (SentencePiece-style, byte fallback)") {
    check_fixture(fs::path(ACTORD_SOURCE_DIR) / "models/stories260K", corpus, kFixtures / "stories260K");
  }
  SECTION("extra fixtures (ACTORD_TOKENIZER_CONFORMANCE_EXTRA)") {
    const char* extra = std::getenv("ACTORD_TOKENIZER_CONFORMANCE_EXTRA");
    if (!extra || !*extra) return;
    std::error_code ec;
    std::size_t n = 0;
    for (const auto& entry : fs::directory_iterator(extra, ec)) {
      if (!fs::is_regular_file(entry.path() / "expected.json")) continue;
      check_fixture(entry.path(), corpus);
      ++n;
    }
    CHECK(n > 0);
  }
}

TEST_CASE("GPT-2 variants cover Split, Digits, Unicode forms and Regex Replace", "[tokenizer][conformance]") {
  const std::vector<std::string> corpus = load_corpus();
  const nlohmann::json variants = read_json(kFixtures / "variants.json");
  const nlohmann::json base = read_json(kFixtures / "gpt2/tokenizer.json");
  REQUIRE(variants.size() >= 5);
  for (const auto& [name, patch] : variants.items()) {
    DYNAMIC_SECTION(name) {
      nlohmann::json t = base;
      for (const auto& [field, value] : patch.items()) t[field] = value;
      const fs::path dir = fs::temp_directory_path() / ("actord-tokconf-" + name + "-" + std::to_string(std::rand()));
      fs::create_directories(dir);
      {
        std::ofstream out(dir / "tokenizer.json", std::ios::binary);
        out << t.dump();
      }
      check_fixture(dir, corpus, kFixtures / "variants" / name);
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
}

TEST_CASE("byte-level pieces load and round-trip", "[tokenizer][conformance]") {
  auto tok = actord::Tokenizer::load(kFixtures / "gpt2");
  REQUIRE(tok.ok());
  CHECK(tok->vocab_size() == 50257);
  CHECK(tok->encode("Hello world", false) == std::vector<int32_t>{15496, 995});
  CHECK(tok->decode({15496, 995}) == "Hello world");
  CHECK(tok->encode("<|endoftext|>", false) == std::vector<int32_t>{50256});
  CHECK(tok->decode({50256}, true).empty());
  // Invalid UTF-8 input is repaired (U+FFFD) rather than rejected.
  const auto ids = tok->encode(std::string("a\xFF" "b"), false);
  CHECK(tok->decode(ids) == "a\xEF\xBF\xBD" "b");
}
