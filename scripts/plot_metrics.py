#!/usr/bin/env python3
"""Plot reward and accuracy curves of an rlpt run to PNG.

    scripts/plot_metrics.py runs/<experiment>/metrics.jsonl [out.png] [--keys k1,k2,...]

Reads the JSON lines rlpt writes (one object per step, verl's metric names) and draws the
training score/accuracy per step and every validation accuracy (val-core/*/acc/*) on one
figure. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import sys


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    path = argv[1]
    out = argv[2] if len(argv) > 2 and not argv[2].startswith("--") else path.rsplit(".", 1)[0] + ".png"
    keys = None
    if "--keys" in argv:
        keys = argv[argv.index("--keys") + 1].split(",")
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    if not rows:
        print(f"{path}: no metrics", file=sys.stderr)
        return 1
    if keys is None:
        found = set(k for r in rows for k in r)
        keys = [k for k in ("critic/score/mean", "train/acc/mean", "sft/loss") if k in found]
        keys += sorted(k for k in found if k.startswith("val-core/") and "/acc/" in k)
        keys += sorted(k for k in found if k == "val/acc")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k in keys:
        pts = [(r["step"], r[k]) for r in rows if r.get(k) is not None]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, label=k)
    ax.set_xlabel("step")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(path)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
