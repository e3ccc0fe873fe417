#!/usr/bin/env bash
# Fetch and build llama.cpp's benchmark tools, the peer of scripts/bench_decode.sh (benchmarks only:
# no test or CI step needs it).
#
# Source: the npm package node-llama-cpp@3.22.1 (MIT) ships the llama.cpp tree it binds as a git
# bundle (llama/gitRelease.bundle; llama/llama.cpp.info.json names the release). `npm pack` fetches
# the tarball without running its install scripts; the bundle is cloned into DEST/src and
# llama-batched-bench + llama-bench are built there: CPU only, Release, GGML_NATIVE (this machine's
# ISA), static, no examples/tests/server/HTTPS. gguf-py (DEST/src/gguf-py, pure Python + numpy) is what
# scripts/hf_to_gguf.py writes the benchmark's GGUF files with.
#
# Usage: scripts/fetch_llama_cpp.sh [DEST]
#   DEST defaults to ${RLPT_LLAMA_CPP_DIR:-$HOME/.cache/rlpt/llama.cpp}. Idempotent: quiet when the
#   binaries of this version are already built. Prints `LLAMA_CPP_DIR=DEST` last; the tools are in
#   DEST/build/bin. Exits non-zero with the reason on stderr when npm, git, cmake or the build fail.
set -euo pipefail

pkg="node-llama-cpp@3.22.1"
dest="${1:-${RLPT_LLAMA_CPP_DIR:-$HOME/.cache/rlpt/llama.cpp}}"
stamp="$dest/build/rlpt-built-from"
tools=(llama-batched-bench llama-bench)

built() {
    [[ -f "$stamp" && "$(cat "$stamp")" == "$pkg" ]] || return 1
    for t in "${tools[@]}"; do [[ -x "$dest/build/bin/$t" ]] || return 1; done
}

if ! built; then
    for c in npm git cmake tar; do
        command -v "$c" >/dev/null || { echo "fetch_llama_cpp: $c not found" >&2; exit 1; }
    done
    mkdir -p "$dest"
    if [[ ! -f "$dest/src/CMakeLists.txt" || "$(cat "$dest/src-from" 2>/dev/null)" != "$pkg" ]]; then
        tmp="$(mktemp -d "$dest/fetch.XXXXXX")"
        trap 'rm -rf "$tmp"' EXIT
        (cd "$tmp" && npm pack --loglevel=error "$pkg" >/dev/null 2>"$tmp/npm.log") || {
            cat "$tmp/npm.log" >&2; echo "fetch_llama_cpp: npm pack $pkg failed" >&2; exit 1; }
        tar xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
        rm -rf "$dest/src" "$dest/build"
        git clone --quiet -c advice.detachedHead=false "$tmp/package/llama/gitRelease.bundle" "$dest/src"
        cp "$tmp/package/llama/llama.cpp.info.json" "$dest/llama.cpp.info.json"
        echo "$pkg" >"$dest/src-from"
    fi
    echo "fetch_llama_cpp: building ${tools[*]} in $dest/build (a few minutes on 2 cores)" >&2
    cmake -S "$dest/src" -B "$dest/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON >"$dest/cmake.log" 2>&1 || {
        tail -20 "$dest/cmake.log" >&2; echo "fetch_llama_cpp: cmake configure failed (log: $dest/cmake.log)" >&2; exit 1; }
    cmake --build "$dest/build" -j "${RLPT_LLAMA_CPP_JOBS:-2}" --target "${tools[@]}" >"$dest/build.log" 2>&1 || {
        tail -20 "$dest/build.log" >&2; echo "fetch_llama_cpp: build failed (log: $dest/build.log)" >&2; exit 1; }
    echo "$pkg" >"$stamp"
    built || { echo "fetch_llama_cpp: build finished but ${tools[*]} are missing in $dest/build/bin" >&2; exit 1; }
fi
echo "LLAMA_CPP_DIR=$dest"
