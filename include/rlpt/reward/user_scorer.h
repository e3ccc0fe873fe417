#pragma once
/* rlpt user scorer ABI, version 1. Pure C (C99); include it from C or
 * C++.
 *
 * A user scorer is a shared library that rlpt loads at run time (dlopen) and calls once
 * per sample to turn a decoded response into a reward. In a run it is set with the config
 * keys reward.custom_library=/abs/path/libmyscorer.so plus reward.scorer=custom (it then
 * scores every data_source) or reward.scorer=auto (it scores the data_sources that have no
 * built-in scorer). One data_source alone takes it through the per-data_source map
 * reward.scorers: {my/data: user} (the library of reward.custom_library) or
 * reward.scorers: {my/data: {type: user, path: /abs/path/lib.so}} (its own library; see
 * rlpt/reward/registry.h, make_scorer / make_scorer_registry).
 * See scripts/examples/user_scorer.c for a complete example with build instructions.
 *
 * The library exports two functions with C linkage (use RLPT_SCORER_EXPORT):
 *
 *   int rlpt_scorer_abi_version(void);
 *       Returns RLPT_SCORER_ABI_VERSION as the library was compiled. rlpt refuses to load a
 *       library whose version differs from its own.
 *
 *   int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out);
 *       Scores one sample. Returns 0 on success. Any other value is an error: write a
 *       NUL-terminated message into out->error_message (at most error_message_capacity
 *       bytes including the NUL); rlpt raises it, naming the library, the sample index and
 *       the data_source, and the run stops. Return an error only for bad data or a broken
 *       scorer, never for a wrong or malformed model answer: score those low instead.
 *
 * Strings: UTF-8, given as pointer + length in bytes. rlpt also NUL-terminates each one
 * (data[len] == '\0'), but the text itself may contain NUL bytes, so prefer the lengths.
 * All input memory belongs to rlpt and is valid only during the call; copy what you keep.
 *
 * Output: rlpt zero-fills *out (score 0, acc 0, flags 0, empty buffers) before the call
 * and supplies the buffers. Set out->score (must be finite). Optionally set out->acc
 * (0..1 correctness) together with RLPT_SCORE_HAS_ACC in out->flags, and write the
 * extracted answer as a NUL-terminated string into out->pred (truncate to pred_capacity).
 *
 * Threading: rlpt may call rlpt_score_v1 from several threads at once; keep it reentrant
 * (no unsynchronised global state). The library stays loaded until rlpt exits or the
 * scorer registry is destroyed.
 */
#include <stddef.h>
#include <stdint.h>

#define RLPT_SCORER_ABI_VERSION 1

/* Symbol names rlpt looks up. */
#define RLPT_SCORER_ABI_VERSION_SYMBOL "rlpt_scorer_abi_version"
#define RLPT_SCORE_V1_SYMBOL "rlpt_score_v1"

/* out->flags bits. */
#define RLPT_SCORE_HAS_ACC 1u

#ifdef __cplusplus
#define RLPT_SCORER_EXTERN_C extern "C"
#else
#define RLPT_SCORER_EXTERN_C
#endif

#if defined(_WIN32)
#define RLPT_SCORER_EXPORT RLPT_SCORER_EXTERN_C __declspec(dllexport)
#else
#define RLPT_SCORER_EXPORT RLPT_SCORER_EXTERN_C __attribute__((visibility("default")))
#endif

typedef struct rlpt_score_input {
    const char* data_source; /* the sample's data_source, e.g. "my/dataset" */
    size_t data_source_len;
    const char* solution; /* the decoded response (special tokens removed) */
    size_t solution_len;
    const char* ground_truth; /* the dataset's ground truth */
    size_t ground_truth_len;
    const char* extra_info_json; /* the sample's extra fields as a JSON object, "{}" if none */
    size_t extra_info_json_len;
    int64_t index; /* the sample's index in the batch being scored */
} rlpt_score_input;

typedef struct rlpt_score_output {
    double score;         /* the reward; must be finite */
    double acc;           /* correctness in [0, 1], read when flags has RLPT_SCORE_HAS_ACC */
    uint32_t flags;       /* RLPT_SCORE_HAS_ACC */
    char* pred;           /* buffer for the extracted answer, NUL-terminated */
    size_t pred_capacity; /* bytes available in pred, including the NUL */
    char* error_message;  /* buffer for an error message, NUL-terminated */
    size_t error_message_capacity;
} rlpt_score_output;

typedef int (*rlpt_scorer_abi_version_fn)(void);
typedef int (*rlpt_score_v1_fn)(const rlpt_score_input* in, rlpt_score_output* out);
