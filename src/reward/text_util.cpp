#include "reward/text_util.h"

namespace rlpt::reward::detail {

std::size_t utf8_char_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

static bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

std::size_t utf8_length(std::string_view s) {
    std::size_t n = 0;
    for (char c : s) {
        if (!is_continuation(static_cast<unsigned char>(c))) ++n;
    }
    return n;
}

std::string_view utf8_tail(std::string_view s, std::size_t n) {
    if (n == 0) return s.substr(s.size());
    std::size_t count = 0;
    std::size_t i = s.size();
    while (i > 0) {
        --i;
        if (!is_continuation(static_cast<unsigned char>(s[i]))) {
            if (++count == n) return s.substr(i);
        }
    }
    return s;
}

std::string_view utf8_first(std::string_view s) {
    if (s.empty()) return s;
    std::size_t len = utf8_char_len(static_cast<unsigned char>(s[0]));
    std::size_t end = 1;
    while (end < len && end < s.size() && is_continuation(static_cast<unsigned char>(s[end]))) ++end;
    return s.substr(0, end);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    std::size_t pos = 0;
    while (true) {
        std::size_t hit = s.find(from, pos);
        if (hit == std::string_view::npos) break;
        out.append(s.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s.substr(pos));
    return out;
}

std::vector<std::string> split(std::string_view s, std::string_view sep) {
    std::vector<std::string> parts;
    std::size_t pos = 0;
    while (true) {
        std::size_t hit = s.find(sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep.size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
}

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string_view trim_ascii(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    std::size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return s.substr(s.size());
    std::size_t e = s.find_last_not_of(ws);
    return s.substr(b, e - b + 1);
}

}  // namespace rlpt::reward::detail
