#!/usr/bin/env bash
# Retakes library-*.png, draft-measuring-*.png and draft-ranking-*.png (docs/screenshots/library.py) at each size
# named (default: 1600x1000 1000x700) on an X server of that size: Xvfb + openbox, as take.sh. Needs the Qwen pair
# installed (make run) and take.sh's packages. Each size runs Find the best draft once (about a minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
DISPLAY_NUMBER=:94
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done' EXIT
for size in "${@:-1600x1000 1000x700}"; do
    for one in $size; do
        Xvfb "$DISPLAY_NUMBER" -screen 0 "${one}x24" -nolisten tcp >/dev/null 2>&1 &
        PIDS+=($!)
        sleep 1  # the server's socket
        DISPLAY=$DISPLAY_NUMBER openbox >/dev/null 2>&1 &
        PIDS+=($!)
        DISPLAY=$DISPLAY_NUMBER timeout 900 .venv/bin/python docs/screenshots/library.py "$one"
        kill "${PIDS[@]}" 2>/dev/null || true
        wait "${PIDS[@]}" 2>/dev/null || true
        PIDS=()
    done
done
