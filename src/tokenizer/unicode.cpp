#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include "rlpt/core/error.h"

namespace rlpt::tokenizer::detail {

namespace {

// Valid range of the second byte for each lead byte (Unicode Table 3-7); other continuation
// bytes are 0x80..0xBF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
    switch (lead) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: return b >= 0x80 && b <= 0xBF;
    }
}

// Sequence length announced by a lead byte, 0 when it cannot start a sequence.
int sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

// Number of bytes of a valid prefix of the sequence at s[i] (0 when the lead is invalid); sets
// complete when the whole sequence is valid.
size_t valid_prefix(std::string_view s, size_t i, bool& complete) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const int len = sequence_length(lead);
    complete = false;
    if (len == 0) return 0;
    if (len == 1) {
        complete = true;
        return 1;
    }
    size_t k = 1;
    for (; k < static_cast<size_t>(len); ++k) {
        if (i + k >= s.size()) return k;
        const auto b = static_cast<unsigned char>(s[i + k]);
        const bool ok = (k == 1) ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
        if (!ok) return k;
    }
    complete = true;
    return k;
}

}  // namespace

bool utf8_next(std::string_view s, size_t& i, char32_t& cp) {
    bool complete = false;
    const size_t n = valid_prefix(s, i, complete);
    if (!complete) return false;
    const auto lead = static_cast<unsigned char>(s[i]);
    if (n == 1) {
        cp = lead;
    } else {
        cp = lead & (0xFF >> (n + 1));
        for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    i += n;
    return true;
}

void check_utf8(std::string_view s, const char* what) {
    size_t i = 0;
    char32_t cp = 0;
    while (i < s.size()) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        if (!utf8_next(s, i, cp)) {
            RLPT_THROW(ValueError, "invalid UTF-8 in {} at byte {} (byte 0x{:02X})", what, i,
                       static_cast<unsigned char>(s[i]));
        }
    }
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    size_t i = 0;
    while (i < bytes.size()) {
        bool complete = false;
        const size_t n = valid_prefix(bytes, i, complete);
        if (complete) {
            out.append(bytes.data() + i, n);
            i += n;
        } else {
            out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal invalid subpart
            i += (n == 0) ? 1 : n;
        }
    }
    return out;
}

const std::array<char32_t, 256>& byte_to_unicode() {
    static const std::array<char32_t, 256> table = [] {
        std::array<char32_t, 256> t{};
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            t[b] = printable ? static_cast<char32_t>(b) : next++;
        }
        return t;
    }();
    return table;
}

int unicode_to_byte(char32_t cp) {
    static const std::array<int16_t, 324> inverse = [] {
        std::array<int16_t, 324> inv{};
        inv.fill(-1);
        const auto& fwd = byte_to_unicode();
        for (int b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<int16_t>(b);
        return inv;
    }();
    return cp < inverse.size() ? inverse[cp] : -1;
}

bool is_white_space(char32_t cp) { return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE); }

bool is_word_char(char32_t cp) {
    const auto c = static_cast<UChar32>(cp);
    if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
    const int32_t mask = U_GET_GC_MASK(c);
    return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

std::string nfc(std::string_view s) {
    bool ascii = true;
    for (char ch : s) {
        if (static_cast<unsigned char>(ch) >= 0x80) {
            ascii = false;
            break;
        }
    }
    if (ascii) return std::string(s);
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* norm = icu::Normalizer2::getNFCInstance(status);
    RLPT_CHECK_KIND(InternalError, U_SUCCESS(status), "ICU NFC normalizer unavailable: {}", u_errorName(status));
    const icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
    if (norm->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(s);
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(s.size()));
    norm->normalizeUTF8(0, piece, sink, nullptr, status);
    RLPT_CHECK_KIND(InternalError, U_SUCCESS(status), "ICU NFC normalization failed: {}", u_errorName(status));
    return out;
}

std::string describe_code_point(char32_t cp) {
    std::string printable;
    if (cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0)) append_utf8(printable, cp);
    if (printable.empty()) return fmt::format("U+{:04X}", static_cast<uint32_t>(cp));
    return fmt::format("U+{:04X} '{}'", static_cast<uint32_t>(cp), printable);
}

}  // namespace rlpt::tokenizer::detail
