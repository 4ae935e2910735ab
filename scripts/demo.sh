#!/usr/bin/env bash
# Install what the evaluation needs (scripts/setup.sh demo: the package and its offline models;
# no Playwright, Chromium, study, Ray or test extras) and run a demo evaluation on real data with
# real models: emoji images with their CLDR names in English, German and Japanese; which encoder
# wins, without parallel data? Usage: bash scripts/demo.sh [OUT] (default out/demo).
# The emoji data come from the npm registry (npm pack) into the user cache on first use;
# set BACKRETRIEVAL_EMOJI_DIR to a folder with the .tgz files to skip the download (the shared
# data folder's npm/ is used when it exists: $BACKRETRIEVAL_SHARED_DATA, default ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
SHARED=${BACKRETRIEVAL_SHARED_DATA:-../shared/data}
if [ -z "${BACKRETRIEVAL_EMOJI_DIR:-}" ] && [ -d "$SHARED/npm" ]; then
  export BACKRETRIEVAL_EMOJI_DIR="$SHARED/npm"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "${BACKRETRIEVAL_VENV:-.venv}/bin/backretrieval" evaluate --dataset emoji-cldr --pairs en-de,de-en,en-ja \
  --models use-m,e5-small,minilm-en,tfidf-char,random --image-model efficientnet-lite0 \
  --n 1500 --seeds 3 --k 10 --out "${1:-out/demo}"
