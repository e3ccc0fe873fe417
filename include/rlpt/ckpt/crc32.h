#pragma once
// CRC-32 (IEEE 802.3 / zlib polynomial 0xEDB88320, reflected, init and final xor 0xFFFFFFFF),
// slice-by-8. crc32("123456789") == 0xCBF43926. Chainable: crc32(b, nb, crc32(a, na)) equals the
// CRC of a followed by b. Torch-free, thread-safe (no state).

#include <cstddef>
#include <cstdint>

namespace rlpt::ckpt {

uint32_t crc32(const void* data, size_t size, uint32_t previous = 0);

}  // namespace rlpt::ckpt
