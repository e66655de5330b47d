#!/usr/bin/env bash
# Retakes the screenshots in this folder as a user sees the app: the real window, title bar included, on an X server
# (Xvfb + openbox), driven with xdotool, captured with ImageMagick's `import`. Needs: xvfb openbox xdotool
# imagemagick x11-utils and Qt's xcb libraries (README, "Set up and run"). Run on a quiet machine: the window shows
# live speed figures.
#   docs/screenshots/take.sh [1600x1000 1000x700]     # TAKE_TIMEOUT=S: wait longer than 600 s for a reply
# Each picture is the whole window in its frame, sized to fit the named screen. The window is never smaller than
# 1000x700 inside its frame (ui/main_window.py), so the 1000x700 pictures are that plus openbox's title bar and
# borders.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${TAKE_OUT:-docs/screenshots}  # TAKE_OUT, STUDIO: elsewhere, for a try of the script itself
STUDIO=${STUDIO:-.venv/bin/specdec-studio}
DISPLAY_NUMBER=:93
TIMEOUT=${TAKE_TIMEOUT:-600}  # seconds for a start or a reply: model loading takes minutes on a busy 2-core machine
MIN_WIDTH=1000 MIN_HEIGHT=700  # the studio's smallest window (ui/main_window.py)
MARGIN=80  # the X screen is this much larger than the picture, room for the frame of a window at its minimum size
CODE_PROMPT="Write a Python function that checks whether a word is a palindrome."
EARLIER_PROMPTS=("What is a hash table? Explain it in two sentences." "Give me three ideas for a quiet evening at home.")

PIDS=()  # what this script started (the studio, openbox, Xvfb), stopped in reverse order however it ends
SCRATCH=$(mktemp -d)
stop_all() {
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null || true; done
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do wait "${PIDS[i]}" 2>/dev/null || true; done
    PIDS=()
}
trap 'stop_all; rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
exec 3>&2  # the script's own messages, also from inside a poll that silences its command

fail() {
    echo "take.sh: $*" >&3
    if [ -s "$SCRATCH/studio.log" ]; then tail -n 20 "$SCRATCH/studio.log" >&3; fi
    exit 1
}

start() {  # start COMMAND...: run it in the background, remembered for cleanup; its pid in $STARTED
    "$@" >>"$SCRATCH/studio.log" 2>&1 &
    STARTED=$!
    PIDS+=("$STARTED")
}

poll() {  # poll SECONDS WHAT COMMAND...: until COMMAND succeeds, once a second; WHAT names it in the error
    local seconds=$1 what=$2
    shift 2
    for ((t = 0; t < seconds; t++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    fail "no $what after $seconds s"
}

alive() {  # alive PID WHAT: WHAT (pid PID) has not quit before it was done: a failed start or load, a crash
    kill -0 "$1" 2>/dev/null || fail "$2 exited early"
}

studio_window() {  # the studio's visible top-level window, once it has one
    xdotool search --onlyvisible --name "^SpecDec Studio$" 2>/dev/null | head -1
}

x_running() { alive "$XVFB" Xvfb; xdpyinfo; }
wm_running() { alive "$WM" openbox; xprop -root _NET_SUPPORTING_WM_CHECK | grep -q "window id"; }
window_shown() { alive "$APP" "the studio"; [ -n "$(studio_window)" ]; }
reply_saved() { alive "$APP" "the studio"; [ -s "$1" ]; }  # it grabs itself (--screenshot) once the reply is done
framed() { xprop -id "$1" _NET_FRAME_EXTENTS | grep -q "="; }

frame_extents() {  # frame_extents WINDOW: "left right top bottom" of openbox's frame around it
    xprop -id "$1" _NET_FRAME_EXTENTS | grep -o '[0-9][0-9, ]*$' | tr -d ','
}

client_origin() {  # client_origin WINDOW: "x y" of the window's content on the screen
    xwininfo -id "$1" | awk '/Absolute upper-left X/ {x = $NF} /Absolute upper-left Y/ {y = $NF} END {print x, y}'
}

place() {  # place WINDOW WIDTH HEIGHT: the frame at the screen's top left, the whole frame WIDTH x HEIGHT at most
    local window=$1 left right top bottom width height x y to_x=0 to_y=0
    read -r left right top bottom <<<"$(frame_extents "$window")"
    width=$(($2 - left - right)) height=$(($3 - top - bottom))
    width=$((width < MIN_WIDTH ? MIN_WIDTH : width)) height=$((height < MIN_HEIGHT ? MIN_HEIGHT : height))
    for _ in 1 2 3 4 5; do  # openbox may still be placing the window: a move or resize before that is undone
        xdotool windowsize --sync "$window" "$width" "$height" 2>/dev/null || true
        # Where a move puts the content depends on the window's gravity: aim again by what was off.
        xdotool windowmove --sync "$window" "$to_x" "$to_y" 2>/dev/null || true
        sleep 1
        read -r x y <<<"$(client_origin "$window")"
        to_x=$((to_x + left - x)) to_y=$((to_y + top - y))
        if [ "$x $y" = "$left $top" ] && xdotool getwindowgeometry "$window" | grep -q "Geometry: ${width}x${height}$"
        then
            FRAME="$((width + left + right))x$((height + top + bottom))"
            return 0
        fi
    done
    fail "could not place the window at ${width}x${height} (openbox's frame: $left $right $top $bottom)"
}

shot() {  # shot NAME: the window in its frame, from the screen's top left
    import -window root -crop "$FRAME+0+0" +repage "$OUT/$1"
}

take() {
    local size=$1 data work window answered
    local width=${size%x*} height=${size#*x}
    data=$(mktemp -d -p "$SCRATCH") work=$(mktemp -d -p "$SCRATCH")
    [ ! -e "/tmp/.X${DISPLAY_NUMBER#:}-lock" ] || fail "display $DISPLAY_NUMBER is in use (/tmp/.X${DISPLAY_NUMBER#:}-lock)"
    # -noreset: by default the server resets when its last client (a probe below) disconnects, dropping openbox
    start Xvfb "$DISPLAY_NUMBER" -screen 0 "$((width + MARGIN))x$((height + MARGIN))x24" -nolisten tcp -noreset
    XVFB=$STARTED
    export DISPLAY=$DISPLAY_NUMBER
    poll 30 "X server on $DISPLAY" x_running
    start openbox
    WM=$STARTED
    poll 30 "window manager" wm_running
    # 1) two earlier chats for the history sidebar
    for prompt in "${EARLIER_PROMPTS[@]}"; do
        start timeout "$TIMEOUT" "$STUDIO" --data-dir "$data" --prompt "$prompt" --quit-after-reply
        wait "$STARTED" || answered=$?
        [ "${answered:-0}" != 124 ] || fail "the studio did not answer \"$prompt\" within $TIMEOUT s"
        [ "${answered:-0}" = 0 ] || fail "the studio failed on \"$prompt\" (exit status $answered)"
    done
    # 2) the code answer, in a window that fits the screen
    start "$STUDIO" --data-dir "$data" --prompt "$CODE_PROMPT" --screenshot "$work/done.png"
    APP=$STARTED
    poll "$TIMEOUT" "studio window" window_shown
    window=$(studio_window)
    poll 30 "frame around the window" framed "$window"
    place "$window" "$width" "$height"
    poll "$TIMEOUT" "reply" reply_saved "$work/done.png"
    xdotool windowactivate --sync "$window"
    sleep 1  # a repaint after the activation
    shot "code-answer-clean-$size.png"
    # 3) the same answer as a speculative trace
    xdotool key ctrl+t
    sleep 1
    shot "code-answer-trace-$size.png"
    xdotool key ctrl+t
    # 4) an earlier chat restored from the history sidebar (its second entry, top left)
    xdotool mousemove --window "$window" 60 85 click 1
    sleep 2
    shot "history-$size.png"
    echo "take.sh: $size: pictures of $FRAME in $OUT"
    stop_all
    poll 30 "end of the X server on $DISPLAY" test ! -e "/tmp/.X${DISPLAY_NUMBER#:}-lock"
}

for size in ${@:-1600x1000 1000x700}; do
    [[ $size =~ ^[0-9]+x[0-9]+$ ]] || fail "a size is WIDTHxHEIGHT, not $size"
    take "$size"
done
