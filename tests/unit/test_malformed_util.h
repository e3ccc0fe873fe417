#pragma once
// Helpers for the malformed-input tests (tests/unit/test_malformed_*.cpp): a seeded byte
// mutator, a mini-fuzz loop that lets only rlpt::Error escape, a checker for named cases and
// a temporary directory. Deterministic: every run tries the same inputs.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "rlpt/core/error.h"

namespace rlpt::malformed {

// Mutates byte strings: bit flips, random or "interesting" bytes, insertions, deletions,
// duplicated chunks, truncation. `alphabet` biases inserted bytes toward the format's syntax.
class Mutator {
  public:
    explicit Mutator(uint64_t seed, std::string alphabet = {}) : rng_(seed), alphabet_(std::move(alphabet)) {}

    std::string mutate(const std::string& in) {
        std::string s = in;
        const int edits = 1 + static_cast<int>(below(4));
        for (int e = 0; e < edits; ++e) edit(s);
        return s;
    }
    uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  private:
    char some_byte() {
        static const char kInteresting[] = {'\0', '\x7f', '\x80', '\xff', '\xfe', '"', '\\', '\n', ':', '-', '9', '['};
        switch (below(3)) {
            case 0: return static_cast<char>(below(256));
            case 1: return kInteresting[below(sizeof(kInteresting))];
            default: return alphabet_.empty() ? static_cast<char>(below(256)) : alphabet_[below(alphabet_.size())];
        }
    }
    void edit(std::string& s) {
        const size_t n = s.size();
        switch (below(7)) {
            case 0:  // flip one bit
                if (n) s[below(n)] ^= static_cast<char>(1u << below(8));
                break;
            case 1:  // overwrite a byte
                if (n) s[below(n)] = some_byte();
                break;
            case 2:  // insert a byte
                s.insert(s.begin() + static_cast<std::ptrdiff_t>(below(n + 1)), some_byte());
                break;
            case 3:  // delete a range
                if (n) {
                    size_t at = below(n);
                    s.erase(at, 1 + below(std::min<size_t>(16, n - at)));
                }
                break;
            case 4:  // duplicate a chunk somewhere else
                if (n) {
                    size_t at = below(n);
                    std::string chunk = s.substr(at, 1 + below(std::min<size_t>(32, n - at)));
                    s.insert(below(s.size() + 1), chunk);
                }
                break;
            case 5:  // truncate
                s.resize(below(n + 1));
                break;
            default:  // overwrite 8 bytes with an extreme little-endian integer
                if (n >= 8) {
                    static const uint64_t kExtremes[] = {0,
                                                         1,
                                                         0x7fffffffffffffffull,
                                                         0x8000000000000000ull,
                                                         0xffffffffffffffffull,
                                                         0xffffffffull,
                                                         1ull << 40};
                    uint64_t v = kExtremes[below(sizeof(kExtremes) / sizeof(kExtremes[0]))];
                    std::memcpy(&s[below(n - 7)], &v, 8);
                }
                break;
        }
    }
    std::mt19937_64 rng_;
    std::string alphabet_;
};

// Printable excerpt of a binary input for failure messages.
inline std::string show(const std::string& s, size_t max = 160) {
    std::string out;
    for (size_t i = 0; i < s.size() && i < max; ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out.push_back(static_cast<char>(c));
        } else {
            out += fmt::format("\\x{:02x}", c);
        }
    }
    if (s.size() > max) out += fmt::format("... ({} bytes)", s.size());
    return out;
}

struct FuzzCounts {
    int accepted = 0;  // parsed without error
    int rejected = 0;  // rlpt::Error of an allowed kind
    int bad = 0;       // anything else (reported as test failures)
};

// Runs `parse(input)` on `iterations` mutations of the seeds. Allowed outcomes: success or an
// rlpt::Error that is not an InternalError (malformed input is the user's problem, not a bug),
// optionally restricted to one kind. Everything else is a test failure naming the input.
template <typename Parse>
FuzzCounts fuzz(const std::vector<std::string>& seeds, int iterations, uint64_t seed, const std::string& alphabet,
                Parse&& parse, std::vector<ErrorKind> allowed_kinds = {}) {
    Mutator m(seed, alphabet);
    FuzzCounts counts;
    for (int i = 0; i < iterations; ++i) {
        const std::string input = m.mutate(seeds[static_cast<size_t>(i) % seeds.size()]);
        std::string problem;
        try {
            parse(input);
            ++counts.accepted;
        } catch (const Error& e) {
            bool ok = e.kind() != ErrorKind::kInternal;
            if (ok && !allowed_kinds.empty()) {
                ok = std::find(allowed_kinds.begin(), allowed_kinds.end(), e.kind()) != allowed_kinds.end();
            }
            if (ok) {
                ++counts.rejected;
            } else {
                problem = std::string("wrong rlpt error kind ") + error_kind_name(e.kind()) + ": " + e.what();
            }
        } catch (const std::exception& e) {
            problem = std::string("non-rlpt exception ") + typeid(e).name() + ": " + e.what();
        } catch (...) {
            problem = "unknown exception";
        }
        if (!problem.empty()) {
            if (++counts.bad <= 5) ADD_FAILURE() << "mutation " << i << ": " << problem << "\n  input: " << show(input);
        }
    }
    return counts;
}

// Runs f; expects exactly an E (or subclass) whose what() contains every part.
template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& parts, const std::string& label = "") {
    try {
        f();
    } catch (const E& e) {
        const std::string what = e.what();
        for (const auto& p : parts) {
            EXPECT_NE(what.find(p), std::string::npos) << label << ": '" << p << "' not in: " << what;
        }
        return;
    } catch (const std::exception& e) {
        ADD_FAILURE() << label << ": wrong exception type " << typeid(e).name() << ": " << e.what();
        return;
    }
    ADD_FAILURE() << label << ": no exception thrown";
}

// A fresh directory removed on destruction.
class TempDir {
  public:
    explicit TempDir(const std::string& tag) {
        path_ = std::filesystem::temp_directory_path() /
                fmt::format("rlpt_malformed_{}_{}_{}", tag, static_cast<long>(getpid()), counter()++);
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    std::string write(const std::string& name, const std::string& bytes) const {
        std::string p = file(name);
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        return p;
    }

  private:
    static int& counter() {
        static int n = 0;
        return n;
    }
    std::filesystem::path path_;
};

// A JSON text nested `depth` levels deep in arrays around `inner`.
inline std::string nested_json(int depth, const std::string& inner = "1") {
    return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

}  // namespace rlpt::malformed
