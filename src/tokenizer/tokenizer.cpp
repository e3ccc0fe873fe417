#include "rlpt/tokenizer/tokenizer.h"

#include <filesystem>

#include "rlpt/core/error.h"
#include "rlpt/tokenizer/bpe_tokenizer.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "tokenizer/files.h"

namespace rlpt::tokenizer {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
    std::error_code ec;
    RLPT_CHECK_KIND(IoError, std::filesystem::is_directory(model_dir, ec),
                    "no tokenizer: model directory '{}' does not exist", model_dir);
    const std::string config_path = detail::path_join(model_dir, "tokenizer_config.json");
    if (detail::is_regular_file(config_path)) {
        const nlohmann::json config = detail::parse_json(detail::read_text_file(config_path), config_path);
        if (config.is_object() && config.contains("rlpt_tokenizer")) {
            const nlohmann::json& kind = config["rlpt_tokenizer"];
            RLPT_CHECK_KIND(IoError, kind.is_string() && kind.get<std::string>() == "char",
                            "{}: unknown \"rlpt_tokenizer\" {} (expected \"char\")", config_path, kind.dump());
            return CharTokenizer::load(model_dir);
        }
    }
    if (detail::is_regular_file(detail::path_join(model_dir, "tokenizer.json"))) {
        return BpeTokenizer::from_dir(model_dir);
    }
    const std::string encoder = detail::path_join(model_dir, "encoder.json");
    const std::string merges = detail::path_join(model_dir, "vocab.bpe");
    if (detail::is_regular_file(encoder) && detail::is_regular_file(merges)) {
        return BpeTokenizer::from_gpt2_files(encoder, merges);
    }
    RLPT_THROW(IoError,
               "no tokenizer in '{}': expected tokenizer.json (Hugging Face) or encoder.json + vocab.bpe (GPT-2)",
               model_dir);
}

}  // namespace rlpt::tokenizer
