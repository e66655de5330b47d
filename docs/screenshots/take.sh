#!/usr/bin/env bash
# Retakes the screenshots in this folder as a user sees the app: the real window on an X server (Xvfb + openbox),
# driven with xdotool, captured with ImageMagick's `import -window root`. Needs: xvfb openbox xdotool imagemagick
# and Qt's xcb libraries (README, "Set up and run"). Run on a quiet machine: the window shows live speed figures.
#   docs/screenshots/take.sh [1600x1000 1000x700]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=docs/screenshots
STUDIO=.venv/bin/specdec-studio
DISPLAY_NUMBER=:93
CODE_PROMPT="Write a Python function that checks whether a word is a palindrome."
EARLIER_PROMPTS=("What is a hash table? Explain it in two sentences." "Give me three ideas for a quiet evening at home.")

wait_for() {  # wait_for FILE SECONDS: the app writes FILE (its own grab) once the reply is complete
    for _ in $(seq "$2"); do [ -s "$1" ] && return 0; sleep 1; done
    echo "take.sh: no reply after $2 s" >&2
    return 1
}

shoot() {
    local size=$1 data work
    data=$(mktemp -d) work=$(mktemp -d)
    Xvfb "$DISPLAY_NUMBER" -screen 0 "${size}x24" -nolisten tcp &
    local xvfb=$!
    sleep 1
    DISPLAY=$DISPLAY_NUMBER openbox &
    local wm=$!
    export DISPLAY=$DISPLAY_NUMBER
    # 1) two earlier chats for the history sidebar
    for prompt in "${EARLIER_PROMPTS[@]}"; do
        "$STUDIO" --data-dir "$data" --prompt "$prompt" --quit-after-reply >/dev/null 2>&1
    done
    # 2) the code answer, in a window that fills the screen
    "$STUDIO" --data-dir "$data" --prompt "$CODE_PROMPT" --screenshot "$work/done.png" >/dev/null 2>&1 &
    local app=$!
    local window
    window=$(xdotool search --sync --onlyvisible --name "SpecDec Studio" | head -1)
    sleep 2  # the window manager places the window first; a resize before that is undone
    xdotool windowmove --sync "$window" 0 0 windowsize --sync "$window" "${size%x*}" "${size#*x}"
    wait_for "$work/done.png" 120
    xdotool windowactivate --sync "$window"
    sleep 1
    import -window root "$OUT/code-answer-clean-$size.png"
    # 3) the same answer as a speculative trace
    xdotool key ctrl+t
    sleep 1
    import -window root "$OUT/code-answer-trace-$size.png"
    xdotool key ctrl+t
    # 4) an earlier chat restored from the history sidebar (its second entry, top left)
    xdotool mousemove --window "$window" 60 85 click 1
    sleep 2
    import -window root "$OUT/history-$size.png"
    kill "$app" "$wm" "$xvfb" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$data" "$work"
}

for size in "${@:-1600x1000 1000x700}"; do
    for one in $size; do shoot "$one"; done
done
