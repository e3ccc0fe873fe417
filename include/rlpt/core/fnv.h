#pragma once
// 64-bit FNV-1a over bytes: the hash behind the agreement checks of collective transfers (every
// rank hashes what it was given and compares with the others). Not cryptographic. Header-only.
#include <cstdint>

namespace rlpt {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

// Continues hash `h` (start from kFnvOffset) over `bytes` bytes at `data`.
inline uint64_t fnv1a_bytes(uint64_t h, const void* data, int64_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (int64_t i = 0; i < bytes; ++i) {
        h ^= p[i];
        h *= kFnvPrime;
    }
    return h;
}

}  // namespace rlpt
