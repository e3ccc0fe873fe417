#!/usr/bin/env python3
"""Serve a verl reward function to rlpt's `command` scorer (JSON lines on stdin/stdout).

    reward.scorer: command            # or per data_source: reward.scorers: {my/task: command}
    reward.command: python3 scripts/examples/reward_server.py my_reward.py [function_name]

my_reward.py defines verl's custom reward signature, unchanged:

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0 if solution_str.strip() == ground_truth else 0.0     # or {"score": ..., "acc": ...}

rlpt sends one request per line, {"data_source", "solution_str", "ground_truth", "extra_info",
"index"}, and reads one reply per line in the same order: {"score": x, ...} (a float result
becomes {"score": x}; a dict result is passed on: "score" required, "acc", "pred" and other
numbers optional), or {"error": "..."} when the function raises (the run stops with that
message). Standard library only; stdout carries replies, so print() inside the reward function
goes to stderr.
"""
import importlib.util
import json
import math
import os
import sys
import traceback


def load_function(path, name):
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"reward_server.py: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise SystemExit(f"reward_server.py: {path} defines no function '{name}'")
    return fn


def as_reply(result):
    if isinstance(result, bool):
        return {"score": float(result)}
    if isinstance(result, (int, float)):
        return {"score": float(result)}
    if isinstance(result, dict):
        if "score" not in result:
            return {"error": f"compute_score returned a dict without 'score': {sorted(result)}"}
        out = {}
        for k, v in result.items():
            if isinstance(v, bool):
                v = float(v)
            if isinstance(v, (int, float)):
                out[k] = float(v) if math.isfinite(v) else None
            elif k == "pred" and isinstance(v, str):
                out[k] = v
        return out
    return {"error": f"compute_score returned {type(result).__name__}, expected a number or a dict"}


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: reward_server.py REWARD_FILE.py [FUNCTION_NAME (default compute_score)]")
    fn = load_function(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "compute_score")
    out = sys.stdout
    sys.stdout = sys.stderr  # print() in user code must not corrupt the replies
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            reply = as_reply(fn(req["data_source"], req["solution_str"], req["ground_truth"],
                                req.get("extra_info")))
        except Exception as e:  # the reward function's error goes back to rlpt, which stops the run
            traceback.print_exc(file=sys.stderr)
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
