"""A verl-style reward function (verl's custom_reward_function signature), served to rlpt by
scripts/examples/reward_server.py:

    reward.scorer: command
    reward.command: python3 scripts/examples/reward_server.py scripts/examples/my_reward.py
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    answer = solution_str.strip()
    if data_source == "digitsum":
        try:
            ok = int(answer) == int(ground_truth)
        except ValueError:
            return {"score": 0.0, "acc": 0.0, "pred": answer}
        return {"score": 1.0 if ok else 0.1, "acc": float(ok), "pred": answer}  # 0.1: a number, wrong
    return {"score": float(answer == ground_truth), "acc": float(answer == ground_truth), "pred": answer}
