#!/usr/bin/env python3
"""Writes a small JSONL task in the shapes a new user brings (docs/your-own-task.md):

  sft.jsonl   {"prompt": ..., "response": ..., "data_source": ...}   SFT demonstrations
  rl.jsonl    {"prompt": ..., "answer": ..., "data_source": ...}     RL prompts with answers
  val.jsonl   {"prompt": ..., "answer": ..., "data_source": ...}     held-out prompts

Two data_sources, scored differently (configs/own_task_grpo.yaml: reward.scorers):
  digitsum  "digitsum 4821=" -> "15"   (a number: the `number` scorer)
  reverse   "reverse abc="   -> "cba"  (text: the `exact` scorer)

    python3 scripts/examples/make_own_task.py OUT_DIR [--train N] [--val N] [--seed S]
"""
import argparse
import json
import os
import random


def problem(rng, source):
    if source == "digitsum":
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 4)))
        return f"digitsum {digits}=", str(sum(int(d) for d in digits))
    word = "".join(rng.choice("abcdef") for _ in range(rng.randint(2, 4)))
    return f"reverse {word}=", word[::-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--val", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    seen = set()

    def rows(n):
        out = []
        while len(out) < n:
            src = rng.choice(["digitsum", "reverse"])
            p, ans = problem(rng, src)
            if p in seen:
                continue
            seen.add(p)
            out.append((src, p, ans))
        return out

    val = rows(a.val)
    train = rows(a.train)
    with open(os.path.join(a.out, "sft.jsonl"), "w") as f:
        for src, p, ans in train:
            f.write(json.dumps({"prompt": p, "response": ans, "data_source": src}) + "\n")
    with open(os.path.join(a.out, "rl.jsonl"), "w") as f:
        for src, p, ans in train:
            f.write(json.dumps({"prompt": p, "answer": ans, "data_source": src}) + "\n")
    with open(os.path.join(a.out, "val.jsonl"), "w") as f:
        for src, p, ans in val:
            f.write(json.dumps({"prompt": p, "answer": ans, "data_source": src}) + "\n")
    print(f"wrote {a.out}/sft.jsonl, rl.jsonl ({len(train)} rows) and val.jsonl ({len(val)} rows)")


if __name__ == "__main__":
    main()
