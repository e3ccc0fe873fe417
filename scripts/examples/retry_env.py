#!/usr/bin/env python3
"""An example rlpt environment (rollout.multi_turn.env_command): the model answers, is told
"wrong, try again" when the answer is not the sample's ground truth, and may retry.

Protocol (include/rlpt/agent/environment.h), one JSON object per line on stdin/stdout:
  {"op": "reset", "episode": e, "sample": {"ground_truth": ..., "data_source": ..., "extra": ...}}
      -> {"observation": ""}
  {"op": "step", "episode": e, "action": "<assistant text>"}
      -> {"observation": "...", "reward": r, "done": bool}
  {"op": "close", "episode": e}      (no reply)

Reward: 1 for a correct answer on the first try, 0.5 on a later one, 0 after --tries wrong ones.
Run: rollout.generator=tool_agent rollout.multi_turn.env_command="python3 scripts/examples/retry_env.py"
"""
import argparse
import json
import re
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--tries", type=int, default=2)
args = parser.parse_args()

episodes = {}  # episode -> {"answer": str, "tries": int}


def last_number(text):
    found = re.findall(r"-?\d+(?:\.\d+)?", text)
    return found[-1] if found else None


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    op, ep = msg["op"], msg["episode"]
    if op == "reset":
        episodes[ep] = {"answer": str(msg["sample"].get("ground_truth", "")).strip(), "tries": 0}
        reply({"observation": ""})
    elif op == "step":
        st = episodes[ep]
        st["tries"] += 1
        if last_number(msg["action"]) == st["answer"]:
            reply({"observation": "", "reward": 1.0 if st["tries"] == 1 else 0.5, "done": True})
        elif st["tries"] >= args.tries:
            reply({"observation": "", "reward": 0.0, "done": True})
        else:
            reply({"observation": "wrong, try again", "reward": 0.0, "done": False})
    elif op == "close":
        episodes.pop(ep, None)
