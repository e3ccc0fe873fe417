#!/usr/bin/env bash
# check_format.sh [--fix] [--all] [--since REF] [FILE...]: the C++/CUDA sources against .clang-format.
#   no FILE           every tracked (and untracked, not ignored) *.h *.hpp *.cpp *.cc *.cu *.cuh *.c
#   --all             the same (kept for scripts that pass it)
#   FILE...           those files (other extensions are skipped)
#   --since REF       the sources changed since the commit REF (git diff REF, plus untracked ones)
#   --fix             rewrite the files in place instead of checking them
# Checking runs `clang-format --dry-run --Werror` and exits 1 listing the files that differ, with the
# command that fixes them. Needs clang-format 14 or newer (Debian 12: apt-get install clang-format);
# CLANG_FORMAT picks another binary. CI runs the default form as the ctest format_check
# (tests/CMakeLists.txt): new files and every file already formatted must stay so.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0 since="" files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fix) fix=1; shift;;
    --all) shift;;
    --since) since="${2:?--since needs a commit}"; shift 2;;
    -h|--help) sed -n '2,12p' "$0"; exit 0;;
    *) files+=("$1"); shift;;
  esac
done
cf="${CLANG_FORMAT:-clang-format}"
command -v "$cf" >/dev/null 2>&1 || { echo "check_format: $cf not found (apt-get install clang-format)" >&2; exit 2; }
major=$("$cf" --version | sed -n 's/.*version \([0-9]*\).*/\1/p' | head -1)
[ "${major:-0}" -ge 14 ] || { echo "check_format: clang-format ${major:-?} is too old (14 or newer)" >&2; exit 2; }

patterns=('*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' '*.c')
if [ -n "$since" ]; then
  mapfile -t files < <({ git diff --name-only --diff-filter=d "$since" -- "${patterns[@]}";
                         git ls-files --others --exclude-standard -- "${patterns[@]}"; } | sort -u)
elif [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- "${patterns[@]}" | sort -u)
else
  kept=()
  for f in "${files[@]}"; do
    case "$f" in *.h|*.hpp|*.cpp|*.cc|*.cu|*.cuh|*.c) kept+=("$f");; esac
  done
  files=(${kept[@]+"${kept[@]}"})
fi
existing=()
for f in ${files[@]+"${files[@]}"}; do [ -f "$f" ] && existing+=("$f"); done
[ ${#existing[@]} -gt 0 ] || { echo "check_format: no C++/CUDA files to check"; exit 0; }

if [ "$fix" -eq 1 ]; then
  "$cf" -i --style=file "${existing[@]}"
  echo "check_format: formatted ${#existing[@]} file(s)"
  exit 0
fi
bad=()
for f in "${existing[@]}"; do
  "$cf" --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf '%s\n' "${bad[@]}"
  echo "check_format: ${#bad[@]} of ${#existing[@]} file(s) differ from .clang-format;" \
       "fix: scripts/check_format.sh --fix FILE... (or clang-format -i FILE...)"
  exit 1
fi
echo "check_format: ${#existing[@]} file(s) formatted"
