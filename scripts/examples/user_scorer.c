/* Example rlpt user scorer: exact answer match, ignoring surrounding whitespace and ASCII
 * letter case. It shows the whole ABI of rlpt/reward/user_scorer.h: reading the inputs by
 * pointer + length, writing score/acc/pred, and reporting an error.
 *
 * Build (from the rlpt source tree; any C99 compiler):
 *     cc -O2 -shared -fPIC -I include scripts/examples/user_scorer.c -o libuser_scorer.so
 *
 * Use it in a run with reward.scorer=custom reward.custom_library=/abs/path/libuser_scorer.so
 * (see rlpt/reward/user_scorer.h for the other ways).
 *
 * Scoring: 1.0 when the trimmed response equals the trimmed ground truth (ASCII case
 * folded), else 0.0; acc is the same; pred is the trimmed response. An empty ground truth
 * is a data error: the scorer reports it instead of scoring.
 */
#include "rlpt/reward/user_scorer.h"

#include <stdio.h>
#include <string.h>

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static char fold(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* Trims [*begin, *begin + *len) in place. */
static void trim(const char** begin, size_t* len) {
    while (*len > 0 && is_space((*begin)[0])) {
        ++*begin;
        --*len;
    }
    while (*len > 0 && is_space((*begin)[*len - 1])) --*len;
}

RLPT_SCORER_EXPORT int rlpt_scorer_abi_version(void) { return RLPT_SCORER_ABI_VERSION; }

RLPT_SCORER_EXPORT int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out) {
    const char* answer = in->solution;
    size_t answer_len = in->solution_len;
    const char* truth = in->ground_truth;
    size_t truth_len = in->ground_truth_len;
    size_t i;
    int equal;

    trim(&answer, &answer_len);
    trim(&truth, &truth_len);
    if (truth_len == 0) {
        snprintf(out->error_message, out->error_message_capacity, "empty ground truth for sample %lld",
                 (long long)in->index);
        return 1;
    }

    equal = answer_len == truth_len;
    for (i = 0; equal && i < answer_len; ++i) equal = fold(answer[i]) == fold(truth[i]);

    out->score = equal ? 1.0 : 0.0;
    out->acc = out->score;
    out->flags |= RLPT_SCORE_HAS_ACC;
    if (out->pred_capacity > 0) {
        size_t n = answer_len < out->pred_capacity - 1 ? answer_len : out->pred_capacity - 1;
        memcpy(out->pred, answer, n);
        out->pred[n] = '\0';
    }
    return 0;
}
