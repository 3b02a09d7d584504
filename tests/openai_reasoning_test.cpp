// Reasoning (api/openai_reasoning): a reasoning model's <think> block split from its answer, whole and streamed a
// byte at a time (which must agree), with the block opened by the reply or by the prompt; the split as Qwen3's own
// chat template makes it when it renders a reply back; reasoning templates told apart.
#include "api/openai_reasoning.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "test_util.hpp"

using namespace actord;

namespace {

struct Split {
  std::string reasoning, content;
};

Split split(const std::string& text, bool opened_in_prompt) {
  ReasoningReader whole(opened_in_prompt), bytes(opened_in_prompt);
  ReasoningReader::Delta w = whole.push(text, true);
  Split s;
  for (const char c : text) {
    ReasoningReader::Delta d = bytes.push(std::string(1, c));
    s.reasoning += d.reasoning;
    s.content += d.content;
  }
  ReasoningReader::Delta d = bytes.push("", true);
  s.reasoning += d.reasoning;
  s.content += d.content;
  INFO(text);
  CHECK(s.reasoning == w.reasoning);
  CHECK(s.content == w.content);
  return s;
}

}  // namespace

TEST_CASE("reasoning: the <think> block is reasoning_content, the rest content, whole and streamed alike",
          "[api][reasoning]") {
  // Qwen3: the reply opens the block; newlines trimmed at the reasoning's ends and the content's start.
  Split s = split("<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello!", false);
  CHECK(s.reasoning == "The user greets me.\nI greet back.");
  CHECK(s.content == "Hello!");
  // DeepSeek R1: the prompt opened it.
  s = split("Two and two.\n</think>\n\nFour.\n", true);
  CHECK(s.reasoning == "Two and two.");
  CHECK(s.content == "Four.\n");
  // Cut off inside the block: all reasoning.
  s = split("<think>\nStill thinking about </thi", false);
  CHECK(s.reasoning == "Still thinking about </thi");
  CHECK(s.content.empty());
  // No block: all content, as it is (whitespace and a '<' that is not the tag included).
  s = split("  <thinking> is not the tag", false);
  CHECK(s.reasoning.empty());
  CHECK(s.content == "  <thinking> is not the tag");
  s = split("\n\n", false);
  CHECK(s.content == "\n\n");
  // An empty block (Qwen3 with enable_thinking false writes one in the prompt; a reply may write one too).
  s = split("<think>\n\n</think>\n\nJust the answer.", false);
  CHECK(s.reasoning.empty());
  CHECK(s.content == "Just the answer.");
  // Only the first </think> ends the block; a later one is content.
  s = split("<think>a</think>b</think>c", false);
  CHECK(s.reasoning == "a");
  CHECK(s.content == "b</think>c");
  // Newlines inside the reasoning stay.
  s = split("<think>\n\na\n\nb\n\n</think>c", false);
  CHECK(s.reasoning == "a\n\nb");
  CHECK(s.content == "c");
}

TEST_CASE("reasoning: prompts that open the block, and the templates that write one", "[api][reasoning]") {
  CHECK(prompt_opens_reasoning("<|Assistant|><think>\n"));
  CHECK_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  CHECK_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  CHECK(prompt_opens_reasoning("<think>a</think> then <think>"));
  const auto root = test::source_dir() / "tests/fixtures/chat_templates";
  auto qwen3 = load_chat_template(root / "qwen3");
  REQUIRE(qwen3.ok());
  CHECK(reasoning_template(*qwen3));
  auto llama2 = load_chat_template(root / "llama2");
  REQUIRE(llama2.ok());
  CHECK_FALSE(reasoning_template(*llama2));
  // Qwen3's generation prompt leaves the block to the model, or closes an empty one with enable_thinking false.
  nlohmann::ordered_json ctx{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  auto open = qwen3->render(ctx);
  REQUIRE(open.ok());
  CHECK_FALSE(prompt_opens_reasoning(*open));
  ctx["enable_thinking"] = false;
  auto closed = qwen3->render(ctx);
  REQUIRE(closed.ok());
  CHECK_THAT(*closed, Catch::EndsWith("<think>\n\n</think>\n\n"));
  CHECK_FALSE(prompt_opens_reasoning(*closed));
  // The template's own split of an assistant message's content, rendered back, agrees with the reader's.
  const std::string reply = "<think>\nStep one.\nStep two.\n</think>\n\nThe answer.";
  nlohmann::ordered_json back{{"messages",
                               {{{"role", "user"}, {"content", "Q"}}, {{"role", "assistant"}, {"content", reply}}}},
                              {"add_generation_prompt", false}};
  auto rendered = qwen3->render(back);
  REQUIRE(rendered.ok());
  const Split s = split(reply, false);
  CHECK_THAT(*rendered, Catch::Contains("<think>\n" + s.reasoning + "\n</think>\n\n" + s.content));
}
