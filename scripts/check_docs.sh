#!/usr/bin/env bash
# check_docs.sh [ROOT]: the documentation checks that ctest runs as `docs_links` (label unit).
#   - every relative link and image in the Markdown files of the repository (README.md,
#     CHANGELOG.md, docs/**, and the other *.md files git knows) resolves to a file inside the
#     repository, and a #fragment to a heading of the file it names;
#   - no Markdown file points outside the repository to the old design notes (../shared);
#   - README.md has at most 300 lines (the rest belongs in docs/).
# Prints each problem as FILE:LINE: ... and exits 1 when there is one. Needs python3.
set -euo pipefail
root="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
exec python3 - "$root" <<'PY'
import os, re, subprocess, sys, unicodedata

root = os.path.realpath(sys.argv[1])
max_readme_lines = 300
problems = []

def markdown_files():
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard",
                              "--", "*.md"], check=True, capture_output=True, text=True).stdout.split("\n")
        files = [f for f in out if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and not x.startswith("build")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))

def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN":
            out.append("-" if ch == " " else ch)
    return "".join(out)

def lines_outside_code(path, keep_code_spans=False):
    """(line number, text) of the lines outside fenced code blocks, inline code removed (or, with
    keep_code_spans, only its backticks)."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^\s*(```+|~~~+)", line)
            if m:
                if fence is None:
                    fence = m.group(1)[0] * len(m.group(1))
                elif m.group(1).startswith(fence):
                    fence = None
                continue
            if fence is None:
                yield n, re.sub(r"(`+)(.+?)\1", r"\2" if keep_code_spans else "", line)

anchors_cache = {}
def anchors(path):
    if path not in anchors_cache:
        seen, found = {}, set()
        for _, line in lines_outside_code(path, keep_code_spans=True):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            h = None
            if m:
                h = m.group(2)
            if h is None:
                continue
            s = slug(h)
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else f"{s}-{k}")
        # Explicit anchors: <a id="x"></a> / <a name="x">
        with open(path, encoding="utf-8") as f:
            found |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", f.read()))
        anchors_cache[path] = found
    return anchors_cache[path]

link_re = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ref_re = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
html_re = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)\"")

def check_target(md, n, target):
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:, ...
        return
    where = f"{os.path.relpath(md, root)}:{n}"
    path, _, frag = target.partition("#")
    dest = os.path.realpath(os.path.join(os.path.dirname(md), path)) if path else md
    if dest != root and not dest.startswith(root + os.sep):
        problems.append(f"{where}: link '{target}' leaves the repository")
        return
    if not os.path.exists(dest):
        problems.append(f"{where}: link '{target}': no such file {os.path.relpath(dest, root)}")
        return
    if frag and dest.endswith(".md") and frag not in anchors(dest):
        problems.append(f"{where}: link '{target}': {os.path.relpath(dest, root)} has no heading '#{frag}'")

files = markdown_files()
for rel in files:
    md = os.path.join(root, rel)
    with open(md, encoding="utf-8") as f:
        raw = f.read().split("\n")
    for n, line in enumerate(raw, 1):
        if "../shared" in line or "/work/shared" in line:
            problems.append(f"{rel}:{n}: points outside the repository (../shared): the design notes are docs/")
    for n, line in lines_outside_code(md):
        for t in link_re.findall(line) + html_re.findall(line):
            check_target(md, n, t)
        m = ref_re.match(line)
        if m:
            check_target(md, n, m.group(1))

readme = os.path.join(root, "README.md")
if not os.path.isfile(readme):
    problems.append("README.md is missing")
else:
    with open(readme, encoding="utf-8") as f:
        count = sum(1 for _ in f)
    if count > max_readme_lines:
        problems.append(f"README.md: {count} lines, more than {max_readme_lines}: move the details into docs/")

for p in problems:
    print(p)
print(f"check_docs: {len(files)} Markdown files, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PY
