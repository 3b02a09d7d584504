#!/usr/bin/env bash
# Sets up and builds actord, then tells a short story with the bundled stories260K model on the CPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
echo
./build/actord generate configs/quickstart.yaml --prompt "Once upon a time" --max-tokens 200 \
  --temperature 0.8 --top-p 0.95 --seed 42 --echo
cat <<'MSG'

That story came from the bundled stories260K model through actord's actors (tokenizer, scheduler, kv_pool,
worker, coordinator) on the CPU. Next:
  ./build/actord generate configs/quickstart-2proc.yaml --prompt "Once upon a time" --max-tokens 100
      the same, with the worker in its own process behind ZeroMQ
  ./build/actord generate --help          every flag; --json prints ids, text and timings
  ./build/actord serve configs/quickstart.yaml
      the OpenAI-compatible HTTP API on 127.0.0.1:8000 (completions, chat, streaming, /metrics); then
      ./build/actord bench serve --url http://127.0.0.1:8000 drives it
Topology files live in configs/ (configs/README.md documents every key).
MSG
