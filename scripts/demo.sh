#!/usr/bin/env bash
# Set up (if needed) and run a demo evaluation on real data with real models: emoji images with
# their CLDR names in English, German and Japanese; which encoder wins, without parallel data?
# The emoji data come from the npm registry (npm pack) into the user cache on first use;
# set BACKRETRIEVAL_EMOJI_DIR to a folder with the .tgz files to skip the download.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${BACKRETRIEVAL_EMOJI_DIR:-}" ] && [ -d ../shared/data/npm ]; then
  export BACKRETRIEVAL_EMOJI_DIR=../shared/data/npm
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/backretrieval evaluate --dataset emoji-cldr --pairs en-de,de-en,en-ja \
  --models use-m,e5-small,minilm-en,tfidf-char,random --image-model efficientnet-lite0 \
  --n 1500 --seeds 3 --k 10 --out "${1:-out/demo}"
