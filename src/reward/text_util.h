#pragma once
// Private string helpers for the rule-based scorers. They reproduce the Python str
// operations verl's scorers use (replace, split, len and indexing by code point) on
// UTF-8 byte strings. Every pattern they look for is ASCII, so byte-level search gives
// the same result as Python's code-point search; only lengths and single-character
// indexing need UTF-8 awareness.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace rlpt::reward::detail {

// Length in bytes of the UTF-8 sequence starting with `lead` (1 for ASCII and for bytes
// that cannot start a sequence, so malformed input never reads past the end).
std::size_t utf8_char_len(unsigned char lead);

// Number of code points (bytes that are not continuation bytes).
std::size_t utf8_length(std::string_view s);

// Python's s[-n:] by code point: the last n code points (the whole string if shorter).
std::string_view utf8_tail(std::string_view s, std::size_t n);

// Python's s[0] by code point: the first code point's bytes ("" when s is empty).
std::string_view utf8_first(std::string_view s);

// Python's str.replace(from, to): all non-overlapping occurrences, left to right.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

// Python's str.split(sep) with a non-empty separator.
std::vector<std::string> split(std::string_view s, std::string_view sep);

bool contains(std::string_view s, std::string_view what);
bool starts_with(std::string_view s, std::string_view prefix);

// Strip ASCII whitespace (space, \t, \n, \r, \f, \v) on both ends.
std::string_view trim_ascii(std::string_view s);

}  // namespace rlpt::reward::detail
