#pragma once
// Raw-pointer kernels behind rlpt/kernels/decode_attention.h (glue in decode_attention.cpp,
// which has validated shapes and converted q to float32 contiguous [B, n_kv, G, hd]).
//
//   k, v   element (b, n, s, d) at b * sb + n * sh + s * hd + d; float32 or bfloat16 (uint16_t)
//   masked [B, S] bool, row-major, or null (no key masked)
//   rows   optional per-row addressing (decode_attention_slots): query row b reads cache row
//          rows.slot[b] (k/v offset slot[b] * sb) and only its keys [0, rows.len[b]),
//          1 <= len[b] <= S; null pointers: row b reads cache row b, keys [0, S)
//   out    [B, n_kv, G, hd] float32 contiguous, every element written

#include <cstdint>

namespace rlpt::kernels::detail {

struct AttentionShape {
    int64_t b, n_kv, g, s, hd;
    int64_t sb, sh;  // batch and head strides of k and v (elements)
};

struct RowMap {
    const int64_t* slot = nullptr;
    const int64_t* len = nullptr;
};

void decode_attention_ref(const float* q, const float* k, const float* v, const bool* masked, RowMap rows,
                          const AttentionShape& shape, float scale, float* out);
void decode_attention_ref(const float* q, const uint16_t* k, const uint16_t* v, const bool* masked, RowMap rows,
                          const AttentionShape& shape, float scale, float* out);

}  // namespace rlpt::kernels::detail
