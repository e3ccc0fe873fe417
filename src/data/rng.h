#pragma once
// Private: a small deterministic generator for data shuffling and task generation.
// SplitMix64 (Steele, Lea, Flood 2014) with unbiased bounded draws. Unlike the standard
// <random> distributions, whose algorithms are implementation-defined, this gives the same
// sequence with every compiler and standard library, so a seed means the same data order
// everywhere.

#include <cstdint>

namespace rlpt::data::detail {

// The SplitMix64 output function: a strong 64-bit mixer.
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

class SplitMix64 {
  public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}

    uint64_t next() {
        state_ += 0x9E3779B97F4A7C15ULL;
        return mix64(state_);
    }

    // Uniform in [0, n), n >= 1, without modulo bias (rejects the short last interval).
    uint64_t below(uint64_t n) {
        const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
        while (true) {
            uint64_t r = next();
            if (r >= threshold) return r % n;
        }
    }

    // Uniform in [lo, hi], lo <= hi.
    int64_t between(int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
    }

  private:
    uint64_t state_;
};

// FNV-1a over bytes, then mixed: a stable string hash (std::hash is not stable).
inline uint64_t stable_hash(const char* data, std::size_t size, uint64_t salt) {
    uint64_t h = 0xCBF29CE484222325ULL ^ salt;
    for (std::size_t i = 0; i < size; ++i) {
        h ^= static_cast<unsigned char>(data[i]);
        h *= 0x100000001B3ULL;
    }
    return mix64(h);
}

}  // namespace rlpt::data::detail
