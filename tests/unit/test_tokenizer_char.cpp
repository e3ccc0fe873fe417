// CharTokenizer (round trips, saving in Hugging Face format, errors) and chat templates.

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/tokenizer/bpe_tokenizer.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "rlpt/tokenizer/chat_template.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using rlpt::tokenizer::CharTokenizer;
using rlpt::tokenizer::ChatFamily;
using Ids = std::vector<int64_t>;

namespace {

const char* kArithmetic = "0123456789+-*/= ";

class TempDir {
  public:
    TempDir() {
        static int counter = 0;
        path_ = fs::temp_directory_path() /
                ("rlpt_chartok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string str() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    fs::path path_;
};

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const rlpt::Error& e) {
        return e.message();
    }
    return "";
}

}  // namespace

TEST(CharTokenizer, IdsFollowTheCharset) {
    CharTokenizer tok(kArithmetic);
    EXPECT_EQ(tok.vocab_size(), 3 + 16);
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.encode("12+3=15"), (Ids{4, 5, 13, 6, 17, 4, 8}));
    EXPECT_EQ(tok.encode("<bos>1<eos><pad>"), (Ids{1, 4, 2, 0}));
    EXPECT_EQ(tok.decode(Ids{1, 4, 5, 2, 0}), "<bos>12<eos><pad>");
    EXPECT_EQ(tok.decode(Ids{1, 4, 5, 2, 0}, true), "12");
    EXPECT_EQ(tok.decode(Ids{4, 99, 5}), "12");  // ids past the vocabulary are skipped
    EXPECT_THROW(tok.decode(Ids{-1}), rlpt::ValueError);
    EXPECT_EQ(tok.id_to_token(3), "0");
    EXPECT_EQ(tok.id_to_token(2), "<eos>");
    EXPECT_THROW(tok.id_to_token(19), rlpt::ValueError);
    EXPECT_EQ(tok.token_to_id("="), 17);
    EXPECT_EQ(tok.token_to_id("<pad>"), 0);
    EXPECT_EQ(tok.token_to_id("12"), -1);
    EXPECT_EQ(tok.token_to_id("x"), -1);
    EXPECT_TRUE(tok.is_special(2));
    EXPECT_FALSE(tok.is_special(3));
    EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(CharTokenizer, RoundTripsMultibyteCharacters) {
    CharTokenizer tok("ab \xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80<>");  // "ab é中😀<>"
    const std::string text = "a \xE4\xB8\xAD\xF0\x9F\x98\x80\xC3\xA9<b";
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80"), (Ids{8}));
    // Without allow_special, "<eos>" is characters; 'e', 'o', 's' are not in the charset.
    EXPECT_THROW(tok.encode("<eos>", false), rlpt::ValueError);
    EXPECT_EQ(tok.encode("<eos>"), (Ids{2}));
}

TEST(CharTokenizer, ErrorsNameTheCharacter) {
    CharTokenizer tok(kArithmetic);
    const std::string msg = message_of([&] { tok.encode("12x"); });
    EXPECT_NE(msg.find("U+0078 'x'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at byte 2"), std::string::npos) << msg;
    EXPECT_NE(message_of([&] { tok.encode("1\n"); }).find("U+000A at byte 1"), std::string::npos);
    EXPECT_THROW(tok.encode("1\xFF"), rlpt::ValueError);

    EXPECT_NE(message_of([] { CharTokenizer t("abca"); }).find("U+0061 'a' appears twice"), std::string::npos);
    EXPECT_NE(message_of([] { CharTokenizer t(""); }).find("empty"), std::string::npos);
    EXPECT_THROW(CharTokenizer("a\xC3"), rlpt::ValueError);
}

TEST(CharTokenizer, SaveLoadRoundTrip) {
    CharTokenizer tok("0123456789+= \xC3\xA9");
    const std::string text = "<bos>12+3=15 \xC3\xA9<eos>";
    TempDir dir;
    tok.save(dir.str());
    auto loaded = rlpt::tokenizer::load_tokenizer(dir.str());
    EXPECT_EQ(loaded->kind(), "char");
    EXPECT_EQ(dynamic_cast<CharTokenizer&>(*loaded).charset(), tok.charset());
    EXPECT_EQ(loaded->vocab_size(), tok.vocab_size());
    EXPECT_EQ(loaded->encode(text), tok.encode(text));

    // The saved file is a Hugging Face tokenizer.json that a BPE reader encodes identically.
    auto as_bpe = rlpt::tokenizer::BpeTokenizer::from_dir(dir.str());
    EXPECT_EQ(as_bpe->encode(text), tok.encode(text));
    EXPECT_EQ(as_bpe->decode(tok.encode("12+3=15")), "12+3=15");
    EXPECT_EQ(as_bpe->eos_id(), 2);
    EXPECT_EQ(as_bpe->pad_id(), 0);
    EXPECT_EQ(as_bpe->bos_id(), 1);
    const auto config = nlohmann::json::parse(std::ifstream(dir.file("tokenizer_config.json")));
    EXPECT_EQ(config["rlpt_tokenizer"], "char");
    EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
}

TEST(CharTokenizer, LoadRejectsOtherFiles) {
    TempDir dir;
    CharTokenizer("ab").save(dir.str());
    auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
        auto j = nlohmann::json::parse(std::ifstream(dir.file("tokenizer.json")));
        edit(j);
        std::ofstream(dir.file("tokenizer.json")) << j.dump();
    };
    auto load_error = [&] { return message_of([&] { CharTokenizer::load(dir.str()); }); };

    rewrite([](auto& j) { j["model"]["merges"] = {"a b"}; });
    EXPECT_NE(load_error().find("model.merges is not empty"), std::string::npos) << load_error();
    rewrite([](auto& j) {
        j["model"]["merges"] = nlohmann::json::array();
        j["model"]["vocab"]["ab"] = 5;
    });
    EXPECT_NE(load_error().find("'ab' (id 5) is not a single character"), std::string::npos) << load_error();
    rewrite([](auto& j) {
        j["model"]["vocab"].erase("ab");
        j["model"]["vocab"]["<pad>"] = 9;
    });
    EXPECT_NE(load_error().find("without gaps or repeats"), std::string::npos) << load_error();
    rewrite([](auto& j) {
        j["model"]["vocab"]["<pad>"] = 0;
        j["model"]["type"] = "WordPiece";
    });
    EXPECT_NE(load_error().find("model.type is not BPE"), std::string::npos) << load_error();
    rewrite([](auto& j) {
        j["model"]["type"] = "BPE";
        j["pre_tokenizer"] = {{"type", "ByteLevel"}};
    });
    EXPECT_NE(load_error().find("pre_tokenizer is not null"), std::string::npos) << load_error();
    EXPECT_NE(load_error().find(dir.file("tokenizer.json")), std::string::npos) << load_error();
    std::ofstream(dir.file("tokenizer.json")) << "{";
    EXPECT_THROW(CharTokenizer::load(dir.str()), rlpt::IoError);
    EXPECT_THROW(CharTokenizer::load(dir.str() + "/missing"), rlpt::IoError);
}

// ---- chat templates ----

TEST(ChatTemplate, Qwen2AddsDefaultSystemPrompt) {
    const std::string s = rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen2, {{"user", "What is 2+3?"}}, true);
    EXPECT_EQ(s, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                 "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen2KeepsGivenSystemAndTurns) {
    const std::string s = rlpt::tokenizer::apply_chat_template(
        ChatFamily::kQwen2, {{"system", "Be terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", " 2+2 "}},
        false);
    EXPECT_EQ(s, "<|im_start|>system\nBe terse.<|im_end|>\n"
                 "<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\nHello.<|im_end|>\n"
                 "<|im_start|>user\n 2+2 <|im_end|>\n");
}

TEST(ChatTemplate, Llama3TrimsContent) {
    const std::string s =
        rlpt::tokenizer::apply_chat_template(ChatFamily::kLlama3,
                                             {{"system", "Be terse."}, {"user", "\n  What is 2+3? \t\n"}}, true);
    EXPECT_EQ(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    // U+3000 (ideographic space) and U+00A0 are whitespace to Python's str.strip too.
    const std::string no_prompt =
        rlpt::tokenizer::apply_chat_template(ChatFamily::kLlama3, {{"user", "\xE3\x80\x80x\xC2\xA0"}}, false);
    EXPECT_EQ(no_prompt, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
    EXPECT_EQ(rlpt::tokenizer::apply_chat_template(ChatFamily::kLlama3, {{"user", " \n\x1f "}}, false),
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
}

TEST(ChatTemplate, NoneConcatenatesContent) {
    EXPECT_EQ(rlpt::tokenizer::apply_chat_template(ChatFamily::kNone, {{"user", "Q: 1+1\nA:"}}, true), "Q: 1+1\nA:");
    EXPECT_EQ(rlpt::tokenizer::apply_chat_template(ChatFamily::kNone, {{"system", "S. "}, {"user", "U"}}, false),
              "S. U");
}

TEST(ChatTemplate, ErrorsAndNames) {
    EXPECT_THROW(rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen2, {}, true), rlpt::ValueError);
    EXPECT_THROW(rlpt::tokenizer::apply_chat_template(ChatFamily::kLlama3, {{"", "x"}}, true), rlpt::ValueError);
    EXPECT_EQ(rlpt::tokenizer::parse_chat_family("qwen2"), ChatFamily::kQwen2);
    EXPECT_EQ(rlpt::tokenizer::parse_chat_family("llama3"), ChatFamily::kLlama3);
    EXPECT_EQ(rlpt::tokenizer::parse_chat_family("none"), ChatFamily::kNone);
    try {
        rlpt::tokenizer::parse_chat_family("chatml");
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("'chatml'"), std::string::npos);
        EXPECT_NE(e.message().find("none, qwen2, llama3"), std::string::npos);
    }
    for (auto f : {ChatFamily::kNone, ChatFamily::kQwen2, ChatFamily::kLlama3}) {
        EXPECT_EQ(rlpt::tokenizer::parse_chat_family(rlpt::tokenizer::chat_family_name(f)), f);
    }
    EXPECT_EQ(rlpt::tokenizer::chat_stop_tokens(ChatFamily::kQwen2),
              (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
    EXPECT_EQ(rlpt::tokenizer::chat_stop_tokens(ChatFamily::kLlama3),
              (std::vector<std::string>{"<|eot_id|>", "<|end_of_text|>"}));
    EXPECT_TRUE(rlpt::tokenizer::chat_stop_tokens(ChatFamily::kNone).empty());
}

TEST(CharTokenizer, CharsetOfTextsIsSortedAndOrderFree) {
    using rlpt::tokenizer::charset_of;
    EXPECT_EQ(charset_of({"cab", "b=é"}), "=abcé");
    EXPECT_EQ(charset_of({"b=é", "cab"}), charset_of({"cab", "b=é"}));
    CharTokenizer tok(charset_of({"digitsum 12=", "3"}));
    EXPECT_EQ(tok.decode(tok.encode("digitsum 21=3")), "digitsum 21=3");
    EXPECT_THROW(charset_of({std::string("\xff")}), rlpt::ValueError);
}
