#!/usr/bin/env bash
# Retakes the screenshots in this folder as a user sees the app: the real window, title bar included, on an X server
# (Xvfb + openbox), driven with xdotool, captured with ImageMagick's `import`. Needs: xvfb openbox xdotool
# imagemagick x11-utils sqlite3 fonts-noto-cjk and Qt's xcb libraries (README, "Set up and run"). Run on a quiet
# machine: the window shows live speed figures.
#   docs/screenshots/take.sh [1600x1000 1000x700]     # TAKE_TIMEOUT=S: wait longer than 600 s for a reply
#   TAKE_ONLY="cjk why" docs/screenshots/take.sh      # only some of the studios below: code cjk long why
# Each picture is the whole window in its frame, sized to fit the named screen, title bar and borders included (the
# window's smallest client area, ui/window/main_window.py, leaves room for them on a 1000x700 screen). The pictures, each
# at both sizes:
#   code-answer-clean, code-answer-trace  a code answer in the clean view, then as a speculative trace (Ctrl+T)
#   history                               an earlier chat reopened from the history sidebar
#   cjk-trace, cjk-inspector              a Chinese reply as a trace, then the inspector pinned on one of its
#                                         rejected drafts (one that is a piece of a character where one is in view)
#   long-prompt-stopped                   a ~4000-word prompt stopped (Esc) while it was read in, shown folded
#   shortcuts                             Help ▸ Keyboard shortcuts (F1) over the window
#   why-gamma                             the "why this γ" tab after three speculative replies measured against AR
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${TAKE_OUT:-docs/screenshots}  # TAKE_OUT, STUDIO: elsewhere, for a try of the script itself
STUDIO=${STUDIO:-.venv/bin/specdec-studio}
PYTHON=${PYTHON:-.venv/bin/python}  # runs locate.py (numpy, Pillow)
DISPLAY_NUMBER=:93
TIMEOUT=${TAKE_TIMEOUT:-600}  # seconds for a start or a reply: model loading takes minutes on a busy 2-core machine
MIN_WIDTH=995 MIN_HEIGHT=620  # the studio's smallest client area (ui/window/main_window.py)
MARGIN=80  # the X screen is this much larger than the picture, room for the frame of a window at its minimum size
CODE_PROMPT="Write a Python function that checks whether a word is a palindrome."
EARLIER_PROMPTS=("What is a hash table? Explain it in two sentences." "Give me three ideas for a quiet evening at home.")
CJK_PROMPT="请用中文介绍一下你自己。"
LONG_PROMPT_WORDS=4000
WHY_PROMPTS=("List the numbers from 1 to 40, separated by commas."  # drafts kept, rejected, in between
             "Invent a strange name for a dragon and describe its cave in three sentences."
             "Write a Python function that returns the largest of three numbers.")
MOST_HOVERS=12  # tokens hovered in search of a piece of a character, at about 2 s each

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
    if [ -s "$SCRATCH/window.png" ]; then  # what locate.py looked at last, kept for a look
        cp "$SCRATCH/window.png" "${TMPDIR:-/tmp}/take-window.png"
        echo "take.sh: the window as last located in: ${TMPDIR:-/tmp}/take-window.png" >&3
    fi
    exit 1
}

start() {  # start COMMAND...: run it in the background, remembered for cleanup; its pid in $STARTED
    "$@" >>"$SCRATCH/studio.log" 2>&1 &
    STARTED=$!
    PIDS+=("$STARTED")
}

forget() {  # forget PID: what `start` started has ended (waited for): nothing to stop any more
    local kept=() pid
    for pid in "${PIDS[@]}"; do [ "$pid" = "$1" ] || kept+=("$pid"); done
    PIDS=("${kept[@]}")
}

finish() {  # finish PID: stop what `start` started
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    forget "$1"
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
dialog_shown() { alive "$APP" "the studio"; xdotool search --onlyvisible --name "^$1\$" | grep -q .; }
studio_windows() { xdotool search --onlyvisible --pid "$APP" 2>/dev/null | wc -l; }  # a tooltip is one more

turns() {  # turns [CONDITION]: how many turns (SQL WHERE CONDITION) the chats database holds; 0 before it exists
    [ -s "$DATA/chats.sqlite3" ] || { echo 0; return; }
    sqlite3 -cmd ".timeout 5000" "$DATA/chats.sqlite3" "SELECT count(*) FROM turns ${1:+WHERE $1}"
}
more_turns() { alive "$APP" "the studio"; [ "$(turns "${2:-}")" -gt "$1" ]; }  # more_turns N [CONDITION]

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

client_geometry() {  # client_geometry WINDOW: "WIDTHxHEIGHT+X+Y" of the window's content on the screen
    xwininfo -id "$1" | awk '/Absolute upper-left X/ {x = $NF} /Absolute upper-left Y/ {y = $NF}
        /^ *Width:/ {w = $NF} /^ *Height:/ {h = $NF} END {print w "x" h "+" x "+" y}'
}

locate() {  # locate PLACE [ARG...]: "x y" lines of a place in the window as it is now (docs/screenshots/locate.py)
    import -window root -crop "$(client_geometry "$WINDOW")" +repage "$SCRATCH/window.png"
    "$PYTHON" docs/screenshots/locate.py "$1" "$SCRATCH/window.png" "${@:2}"
}

point_at() {  # point_at "X Y": the mouse there, in the window
    local x y
    read -r x y <<<"$1"
    xdotool mousemove --window "$WINDOW" "$x" "$y"
}

park_mouse() {  # off the window, in the screen's margin: no hover, and a tooltip goes
    xdotool mousemove "$((WIDTH + MARGIN - 2))" "$((HEIGHT + MARGIN - 2))"
    sleep 0.5
}

long_prompt() {  # about LONG_PROMPT_WORDS words, as a pasted document reads: one paragraph over and over, numbered
    local paragraph="Speculative decoding lets a small draft model guess the next few tokens of a reply, and the \
large target model checks all of the guesses in a single forward pass. The target keeps the longest prefix it \
agrees with, replaces the first token it rejects, and the reply stays exactly what the target alone would write."
    local words i
    words=$(wc -w <<<"$paragraph")
    for ((i = 1; i * (words + 2) <= LONG_PROMPT_WORDS; i++)); do printf 'Part %d. %s\n\n' "$i" "$paragraph"; done
    printf 'Summarise the document above in three sentences.'
}

open_studio() {  # open_studio PROMPT [OPTION...]: the studio, sending PROMPT once its models are loaded ($APP),
    # its window ($WINDOW) placed to fit the screen; it grabs itself into reply.png when the reply is done
    rm -f "$SCRATCH/reply.png"
    start "$STUDIO" --data-dir "$DATA" --prompt "$1" --screenshot "$SCRATCH/reply.png" "${@:2}"
    APP=$STARTED
    poll "$TIMEOUT" "studio window" window_shown
    WINDOW=$(studio_window)
    poll 30 "frame around the window" framed "$WINDOW"
    place "$WINDOW" "$WIDTH" "$HEIGHT"
}

await_reply() {  # until the reply to the studio's prompt is done (and its AR comparison), the window in front
    poll "$TIMEOUT" "reply" reply_saved "$SCRATCH/reply.png"
    xdotool windowactivate --sync "$WINDOW"
    sleep 1  # a repaint after the activation
}

send() {  # send MESSAGE: typed into the message box and sent; until its reply and AR comparison are in the window
    local turns_before compared_before point
    turns_before=$(turns) compared_before=$(turns "comparison IS NOT NULL")
    point=$(locate message-box) || fail "no message box found in the window"
    point_at "$point"
    xdotool click 1
    xdotool type --delay 15 "$1"
    xdotool key Return
    poll 30 "turn for \"$1\" (did the click reach the message box?)" more_turns "$turns_before"
    poll "$TIMEOUT" "reply to \"$1\" compared with AR" more_turns "$compared_before" "comparison IS NOT NULL"
    sleep 2  # the window draws the comparison and the "why this γ" charts once the turn is saved
}

pin_token() {  # pin_token: click a rejected draft of the reply (the trace shows them), one that is a piece of a
    # character if one is in view (in the trace only such tokens have a tooltip), else any token of the reply
    local points point what candidate windows
    mapfile -t points < <(locate tokens rejected)
    [ ${#points[@]} -gt 0 ] || mapfile -t points < <(locate tokens accepted corrected resampled bonus)
    [ ${#points[@]} -gt 0 ] || fail "no token of the reply found in the window"
    point=${points[0]} what="the first token in view (no piece of a character among the first $MOST_HOVERS)"
    park_mouse
    windows=$(studio_windows)
    for candidate in "${points[@]:0:MOST_HOVERS}"; do
        point_at "$candidate"
        sleep 1.5  # Qt shows a tooltip after 0.7 s at rest
        if [ "$(studio_windows)" -gt "$windows" ]; then
            point=$candidate what="a piece of a character"
            break
        fi
        park_mouse
    done
    echo "take.sh: $SIZE: pinned $what, at $point" >&3
    point_at "$point"
    xdotool click 1
    park_mouse
}

# -- the scenes: each shoots the window of the studio open (open_studio) as its prompt left it --------------------

earlier_chats() {  # two chats for the history sidebar, each in a studio that quits after its reply
    local prompt answered
    for prompt in "${EARLIER_PROMPTS[@]}"; do
        start timeout "$TIMEOUT" "$STUDIO" --data-dir "$DATA" --prompt "$prompt" --quit-after-reply
        answered=0
        wait "$STARTED" || answered=$?
        forget "$STARTED"
        [ "$answered" != 124 ] || fail "the studio did not answer \"$prompt\" within $TIMEOUT s"
        [ "$answered" = 0 ] || fail "the studio failed on \"$prompt\" (exit status $answered)"
    done
}

scene_code_answer() {  # the code answer in the clean view, then as a speculative trace
    await_reply
    shot "code-answer-clean-$SIZE.png"
    xdotool key ctrl+t
    sleep 1
    shot "code-answer-trace-$SIZE.png"
    xdotool key ctrl+t
}

scene_history() {  # an earlier chat restored from the history sidebar (its second entry, top left)
    xdotool mousemove --window "$WINDOW" 60 85 click 1
    sleep 2
    shot "history-$SIZE.png"
}

scene_cjk() {  # the Chinese reply as a trace, then with a token of it pinned in the inspector
    await_reply
    xdotool key ctrl+t
    sleep 1
    shot "cjk-trace-$SIZE.png"
    pin_token
    sleep 1
    shot "cjk-inspector-$SIZE.png"
}

scene_stopped_long_prompt() {  # the long prompt stopped (Esc) while the models read it in: folded, the reply stopped
    poll "$TIMEOUT" "turn reading the long prompt" more_turns 0 "text IS NULL"  # sent once the models are loaded
    sleep 3  # a few of its chunks read in
    xdotool windowactivate --sync "$WINDOW"
    xdotool key Escape
    await_reply
    shot "long-prompt-stopped-$SIZE.png"
}

scene_shortcuts() {  # Help ▸ Keyboard shortcuts (F1), open over the window
    xdotool key F1
    poll 20 "Keyboard shortcuts dialog" dialog_shown "Keyboard shortcuts"
    sleep 1
    shot "shortcuts-$SIZE.png"
    xdotool key Escape
}

scene_why_gamma() {  # the "why this γ" tab after three speculative replies, each measured against plain AR
    local prompt
    await_reply
    for prompt in "${WHY_PROMPTS[@]:1}"; do send "$prompt"; done
    xdotool key ctrl+g  # View ▸ Why this γ
    park_mouse
    sleep 1
    shot "why-gamma-$SIZE.png"
}

wanted() {  # wanted NAME: TAKE_ONLY is unset or names it
    [[ -z ${TAKE_ONLY:-} || " $TAKE_ONLY " == *" $1 "* ]]
}

take() {  # take SIZE: every scene on a screen that fits SIZE, each studio with its scenes in turn
    SIZE=$1 WIDTH=${1%x*} HEIGHT=${1#*x}
    DATA=$(mktemp -d -p "$SCRATCH")  # the chats (and the history sidebar) of this size's studios
    [ ! -e "/tmp/.X${DISPLAY_NUMBER#:}-lock" ] || fail "display $DISPLAY_NUMBER is in use (/tmp/.X${DISPLAY_NUMBER#:}-lock)"
    # -noreset: by default the server resets when its last client (a probe below) disconnects, dropping openbox
    start Xvfb "$DISPLAY_NUMBER" -screen 0 "$((WIDTH + MARGIN))x$((HEIGHT + MARGIN))x24" -nolisten tcp -noreset
    XVFB=$STARTED
    export DISPLAY=$DISPLAY_NUMBER
    poll 30 "X server on $DISPLAY" x_running
    start openbox
    WM=$STARTED
    poll 30 "window manager" wm_running
    if wanted code; then
        earlier_chats
        open_studio "$CODE_PROMPT"
        scene_code_answer
        scene_history
        finish "$APP"
    fi
    if wanted cjk; then
        open_studio "$CJK_PROMPT"
        scene_cjk
        finish "$APP"
    fi
    if wanted long; then
        open_studio "$(long_prompt)"
        scene_stopped_long_prompt
        scene_shortcuts
        finish "$APP"
    fi
    if wanted why; then
        open_studio "${WHY_PROMPTS[0]}" --compare-ar --stop-below 0  # every round drafts γ: every position counted
        scene_why_gamma
        finish "$APP"
    fi
    echo "take.sh: $SIZE: pictures of $FRAME in $OUT"
    stop_all
    poll 30 "end of the X server on $DISPLAY" test ! -e "/tmp/.X${DISPLAY_NUMBER#:}-lock"
}

for size in ${@:-1600x1000 1000x700}; do
    [[ $size =~ ^[0-9]+x[0-9]+$ ]] || fail "a size is WIDTHxHEIGHT, not $size"
    take "$size"
done
