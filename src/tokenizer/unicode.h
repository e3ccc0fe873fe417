#pragma once
// Unicode helpers shared by the tokenizers (private to src/tokenizer). UTF-8 in, UTF-8 out.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rlpt::tokenizer::detail {

// Decodes the code point starting at s[i] and advances i. Strict UTF-8 (no overlongs, no
// surrogates, nothing above U+10FFFF). Returns false (i unchanged) on an invalid sequence.
bool utf8_next(std::string_view s, size_t& i, char32_t& cp);

// Throws ValueError "invalid UTF-8 in <what> at byte <offset>" unless s is valid UTF-8.
void check_utf8(std::string_view s, const char* what);

void append_utf8(std::string& out, char32_t cp);

// Bytes -> text, replacing every maximal invalid subsequence with U+FFFD, exactly as Rust's
// String::from_utf8_lossy does (what Hugging Face's ByteLevel decoder uses).
std::string utf8_lossy(std::string_view bytes);

// GPT-2's reversible byte <-> printable code point table: bytes 0x21-0x7E, 0xA1-0xAC and
// 0xAE-0xFF stand for themselves; the other 68 bytes map to U+0100.. in byte order.
const std::array<char32_t, 256>& byte_to_unicode();
// The inverse: the byte a code point stands for, or -1.
int unicode_to_byte(char32_t cp);

// Unicode White_Space (what Rust's char::is_whitespace, Oniguruma's \s and ICU's \s test).
bool is_white_space(char32_t cp);
// Rust regex's \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_word_char(char32_t cp);

// NFC normal form (ICU). ASCII and already-normalized text come back unchanged.
std::string nfc(std::string_view s);

// "U+00E9 'é'" for error messages.
std::string describe_code_point(char32_t cp);

}  // namespace rlpt::tokenizer::detail
