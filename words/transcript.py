"""The chat pane's model, readable without Qt: turns (a user message, a reply with its notes and links), each
reply's token spans, its Markdown blocks in the clean view and the text its code blocks' Copy links copy, and how a
long message folds. ui/chat/view.py renders it; tests read it."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.events import Fate, RoundEvent
from engine.stats import LOADED_ROUNDS, token_pace_s
from words.copies import copy_origin
from words.links import LAST_REPLY_ONLY
from words.markdown import Block, inline_runs, parse_blocks
from words.records import Reply
from words.tokens import TokenSpan, remote_span, reply_text, round_spans
from words.wording import busy_note, load_cause, outside_causes, part_label, remote_line, stats_line

FOLD_LINES = 12  # a user message longer than this (or than FOLD_CHARS) is shown folded: a pasted document
FOLD_CHARS = 1200
OPENING_LINES, OPENING_CHARS = 4, 300  # what a folded message shows: a few lines at 1000 px

@dataclass
class UserItem:
    text: str
    folded: bool = False  # only its opening lines are shown, with a link to show it all

    @property
    def foldable(self) -> bool:
        return self.text.count("\n") >= FOLD_LINES or len(self.text) > FOLD_CHARS

    @property
    def opening(self) -> str:
        """What a folded message shows: its first lines, at most OPENING_CHARS characters, ending on a whole word
        (where a word boundary falls in its second half; text without spaces, such as CJK, is cut where it is)."""
        opening = "\n".join(self.text.split("\n")[:OPENING_LINES])
        if len(opening) > OPENING_CHARS:
            cut = opening[:OPENING_CHARS + 1]
            space = max(cut.rfind(" "), cut.rfind("\n"))
            opening = cut[:space] if space > OPENING_CHARS // 2 else cut[:OPENING_CHARS]
        return opening.rstrip() + " …"

    @property
    def fold_link(self) -> str:
        """The link under a foldable message: what unfolding shows, or folding it back."""
        return f"Show all ({len(self.text.split())} words)" if self.folded else "Fold"


@dataclass
class Note:
    text: str
    warning: bool = False  # drawn in the warning colour: a reply cut at max tokens, a busy machine
    details: str = ""  # shown on demand (the line's tooltip): the figures and causes a plain line leaves out


CUT_AT_MAX_TOKENS = "✂ cut at max new tokens"
ENDED_REPEATING = "⟲ ended: the reply was repeating itself (Continue carries on)"
MACHINE_BUSY = "The machine was busy during this reply: its speed figures are not fair numbers."  # busy_note says why
CONTEXT = "Context: "  # before a ContextNotice's message: the conversation was fitted into the model's window


def fewer_threads_note(reply: Reply) -> Note | None:
    """Where a reply went on with fewer CPU threads than it began with (the worker's answer to a machine whose load
    stalls its threads): one plain line saying from which round and what slowed it, with the details (the load
    measured, the paces the switch was judged by, the rounds it went back to all its threads) on demand; None where
    it did not. A continued reply's parts are each said apart, as each began on all threads and met its own load,
    with their rounds numbered through the whole reply."""
    parts = reply.parts or (reply,)
    before = [sum(len(part.events) for part in parts[:k]) for k in range(len(parts))]
    said = [note for k, part in enumerate(parts)
            if (note := _part_fewer_threads_note(part, before[k], k + 1 if k + 1 < len(parts) else None))]
    if not said:
        return None
    # a warning where the load came from outside, or was not measured; where this window's own drawing stalled the
    # threads of a quiet machine, it says why the drawn tokens/s is what it is, and is no warning
    return Note(" ".join(line for line, _ in said), warning=reply.others_cores is None or bool(outside_causes(reply)),
                details=" ".join(details for _, details in said))


def _slowed_by(part: Reply) -> str:
    """What slowed a part's threads, said plainly (load_cause names it with its figures)."""
    if outside_causes(part):
        return "Slowed by other work on this machine"
    if part.others_cores is None:  # not measured: other programs, or this window's own drawing
        return "Slowed by the machine's load"
    return "Slowed by this window's own drawing"  # the only load left on a machine otherwise quiet


def _part_fewer_threads_note(part: Reply, before: int, ends_part: int | None) -> tuple[str, str] | None:
    """One part's line and details (fewer_threads_note), its rounds after the `before` of the parts it continues;
    `ends_part`: its number where a continuation follows it, which began on all threads again."""
    events = part.events
    first = events[0].threads if events else 0
    dropped = next(((n, e) for n, e in enumerate(events, start=1) if 0 < e.threads < first), None)
    if dropped is None:
        return None
    number, event = dropped
    fewer = "one thread" if event.threads == 1 else f"{event.threads} threads"
    back = next((n for n, e in enumerate(events, start=1) if n > number and e.threads == first), None)
    why = (f"its steps on {first} threads ran over twice as slow as this machine's quiet ones "
           f"({load_cause(part)})")
    # the rounds the worker judged the switch by: the LOADED_ROUNDS before it and the LOADED_ROUNDS after
    on_all = events[max(0, number - 1 - LOADED_ROUNDS):number - 1]
    on_fewer = events[number - 1:number - 1 + LOADED_ROUNDS]
    paces = (f"a token every {token_pace_s(on_fewer) * 1000:.1f} ms against {token_pace_s(on_all) * 1000:.1f} ms "
             f"on {first}")
    slowed = _slowed_by(part)
    if back is not None:
        return (f"{slowed}: tried {fewer} in rounds {before + number}–{before + back - 1}, then went back to "
                f"{first} threads as it was no faster.",
                f"Decoded on {fewer} in rounds {before + number}–{before + back - 1}: {why}; {fewer} made its tokens "
                f"no faster ({paces}), so it went back to {first} from round {before + back}.")
    verdict = (f"{fewer} made its tokens faster ({paces})" if len(on_fewer) == LOADED_ROUNDS
               else f"it ended before {fewer} was judged faster or not")
    if ends_part is not None:
        return (f"{slowed}: went on with {fewer} from round {before + number} to the end of part {ends_part}.",
                f"Decoded on {fewer} in rounds {before + number}–{before + len(events)}, to the end of part "
                f"{ends_part}: {why}, and {verdict}.")
    return (f"{slowed}: went on with {fewer} from round {before + number}.",
            f"Decoded on {fewer} from round {before + number}: {why}, and {verdict}.")


# A stopped reply is part of one: plain AR run to as many tokens would be timed against a reply nobody finished
COMPARE_SKIPPED = "Compare with AR skipped: the reply was stopped (Continue or Regenerate it to compare)"


def reply_notes(reply: Reply) -> list[Note]:
    """The lines the chat shows under a finished reply, before its AR comparison: its figures first, then what
    to know about them (the Markdown export writes the same lines)."""
    source = reply.remote
    notes = [Note(stats_line(reply) if source is None else remote_line(reply))]
    if source is None and (busy := busy_note(reply)):
        notes.append(Note(MACHINE_BUSY, warning=True, details=busy))
    if source is None and (fewer := fewer_threads_note(reply)):
        notes.append(fewer)
    if source is not None and source.reply is not None and source.reply.note:
        notes.append(Note(source.reply.note, warning=True))
    if source is None and reply.stopped and reply.request.compare_ar:
        notes.append(Note(COMPARE_SKIPPED))
    if reply.finish_reason == "length":
        notes.append(Note(CUT_AT_MAX_TOKENS, warning=True))
    elif reply.finish_reason == "repeating":
        notes.append(Note(ENDED_REPEATING, warning=True))
    if source is None and reply.events and reply.events[-1].text_notice:
        notes.append(Note(reply.events[-1].text_notice, warning=True))
    return notes


@dataclass(frozen=True)
class ComparisonView:
    """A reply beside its plain AR run: both texts as clean tokens, where they first part, and why."""

    summary: str
    explanation: str
    reply_tokens: tuple[str, ...]
    ar_tokens: tuple[str, ...]
    first_difference: int | None  # token index; None when the texts agree
    label: str = ""  # before the summary: the part it measured, once the reply is continued (wording.part_label)
    sampled: bool = False  # its plain AR run is another sample of the reply's settings, not the reply's text
    ar_shown: bool = False  # where the texts agree: the two side by side, as where they part, on the user's asking
    details: str = ""  # the summary's on demand (its tooltip): why the reply's est. × stands apart from it

    @property
    def foldable(self) -> bool:
        """Whether plain AR's text waits for a link (fold_link): where the texts agree it repeats the reply's."""
        return self.first_difference is None and bool(self.ar_tokens)

    @property
    def fold_link(self) -> str:
        return "Hide plain AR's text" if self.ar_shown else "Show plain AR's text"


@dataclass
class ReplyItem:
    header: str
    first: int  # index of the reply's first span in Transcript.spans
    end: int  # one past its last span
    notes: list[Note | ComparisonView] = field(default_factory=list)
    turn: int | None = None  # the reply's index among the conversation's replies, once it has finished
    actions: tuple[str, ...] = ()  # names of the links under the notes (chat_links.ACTIONS)
    lookup: bool = False  # drafted with prompt lookup on: its q = 1 drafts are copies
    text: str = ""  # the reply's text once it has finished (what Copy copies)
    rounds: int = 0  # rounds shown, over all its parts: a continuation's rounds are numbered on from them

    @property
    def lasting_actions(self) -> tuple[str, ...]:
        """Its links once a later turn follows it: Regenerate and Continue act on the last reply only."""
        return tuple(action for action in self.actions if action not in LAST_REPLY_ONLY)


def owner_runs(owners: list[int], start: int, end: int):
    """(start, end, owner) of the stretches of [start, end) whose characters come from one token."""
    run = start
    while run < end:
        stop = run + 1
        while stop < end and owners[stop] == owners[run]:
            stop += 1
        yield run, stop, owners[run]
        run = stop


def clean_tokens(tokens: tuple[str, ...]) -> tuple[str, list[int]]:
    """Tokens' text as the clean view reads it and, for each of its characters, the index of the token it came
    from: a comparison's column. The engine writes no text for a control token, so one that reads like it (a
    pasted "<|im_end|>", Qwen's ordinary "</s>") is text."""
    source, owners = "", []
    for index, token in enumerate(tokens):
        source += token
        owners += [index] * len(token)
    return source, owners


class Transcript:
    """Turns → blocks → spans. `spans` holds every token on screen in order; a reply owns a range of it."""

    def __init__(self):
        self.items: list[UserItem | ReplyItem] = []
        self.spans: list[TokenSpan] = []

    def clear(self) -> None:
        self.items.clear()
        self.spans.clear()

    def add_user(self, text: str) -> UserItem:
        item = UserItem(text)
        item.folded = item.foldable
        self.items.append(item)
        return item

    def begin_reply(self, header: str, lookup: bool = False) -> ReplyItem:
        item = ReplyItem(header, len(self.spans), len(self.spans), lookup=lookup)
        self.items.append(item)
        return item

    def continue_reply(self, lookup: bool) -> ReplyItem | None:
        """The last reply, made ready to go on where it stopped (a Continue): each part's comparison stays, named by
        its part as the continuation's will be; its other notes and its links go until it ends. None where the last
        item is no reply."""
        item = self.last_reply()
        if item is None or item is not self.items[-1]:
            return None
        item.notes = [replace(note, label=note.label or part_label(1, continued=True)) for note in item.notes
                      if isinstance(note, ComparisonView)]
        item.actions = ()
        item.lookup = lookup
        return item

    def add_round(self, event: RoundEvent) -> None:
        """The round's spans join the last reply (which must be the last item)."""
        item = self.last_reply()
        if item is None:
            self.spans.extend(round_spans(event))
            return
        self.spans.extend(round_spans(event, item.lookup, item.rounds))
        item.rounds += 1
        if item is self.items[-1]:
            item.end = len(self.spans)

    def add_text(self, text: str) -> None:
        """A remote engine's streamed piece joins the last reply as one span with no fate."""
        item = self.last_reply()
        self.spans.append(remote_span(text, len(self.spans)))
        if item is not None and item is self.items[-1]:
            item.end = len(self.spans)

    def last_reply(self) -> ReplyItem | None:
        return next((item for item in reversed(self.items) if isinstance(item, ReplyItem)), None)

    def replies(self) -> list[ReplyItem]:
        return [item for item in self.items if isinstance(item, ReplyItem)]

    def reply_of_span(self, index: int) -> ReplyItem | None:
        return next((item for item in self.replies() if item.first <= index < item.end), None)

    def message_of(self, item: ReplyItem) -> str:
        """The user's message that the reply answers: the last one before it ("" where the chat opens on a reply)."""
        at = next(k for k, other in enumerate(self.items) if other is item)
        return next((other.text for other in reversed(self.items[:at]) if isinstance(other, UserItem)), "")

    def copy_origin(self, index: int) -> str:
        """Where the copied span `index` came from (words.copies): its run, its round's copies in a row up to it,
        looked for in the reply before the run and in the user's message the reply answers; "" for a span not
        copied."""
        span, item = self.spans[index], self.reply_of_span(index)
        if not span.copied or item is None:
            return ""
        start = index
        while (start > item.first and self.spans[start - 1].copied
               and self.spans[start - 1].round_index == span.round_index):
            start -= 1
        run = "".join(s.text for s in self.spans[start:index + 1])
        return copy_origin(run, self.message_of(item), reply_text(self.spans[item.first:start]))

    def turn_of(self, index: int | None) -> int | None:
        """The turn of the finished reply span `index` belongs to; for no span, the last finished reply's (None when
        there is none, or the span's reply is still streaming)."""
        if index is None:
            finished = [item for item in self.replies() if item.turn is not None]
            return finished[-1].turn if finished else None
        item = self.reply_of_span(index)
        return item.turn if item is not None else None

    def reply_text(self, turn: int) -> str:
        return next((item.text for item in self.replies() if item.turn == turn), "")

    def clean_text(self, item: ReplyItem) -> str:
        """What the clean view reads: no rejected drafts, no chat-template tokens."""
        return reply_text(self.spans[item.first:item.end])

    def clean_source(self, item: ReplyItem) -> tuple[str, list[int]]:
        """The reply's clean text and, for each of its characters, the index of the span it came from."""
        pieces, owners = [], []
        for index in range(item.first, item.end):
            span = self.spans[index]
            if span.clean:
                pieces.append(span.text)
                owners.extend([index] * len(span.text))
        return "".join(pieces), owners

    def cut(self, item: ReplyItem) -> bool:
        """Whether the reply's text stops part-way: still streaming, stopped, or cut at max new tokens (a reply the
        model ended closes with its end-of-turn token)."""
        return item.end > item.first and not self.spans[item.end - 1].special

    def blocks(self, item: ReplyItem) -> list[Block]:
        """The reply's clean text as Markdown blocks (positions into `clean_source`)."""
        return parse_blocks(self.clean_source(item)[0])

    def code_text(self, first: int, block: int) -> str:
        """What a code block's Copy link copies: its text without the fences, as a reader pastes it. `first`: a
        span of its reply; `block`: its index among the reply's blocks (chat_links.code_href)."""
        item = self.reply_of_span(first)
        source = self.clean_source(item)[0]
        code = parse_blocks(source)[block]
        return source[code.start:code.end]

    def code_spans(self, item: ReplyItem) -> set[int]:
        """The spans the trace draws in the monospace font: those in a code block or inline code of the clean text,
        and a rejected draft where the token that replaced it is."""
        source, owners = self.clean_source(item)
        code = set()
        for block in parse_blocks(source):
            if block.kind == "code":
                code.update(owners[block.start:block.end])
                continue
            for start, end, style in inline_runs(source, block.start, block.end):
                if style == "code":
                    code.update(owners[start:end])
        code.update(index for index in range(item.first, item.end - 1)
                    if self.spans[index].fate is Fate.REJECTED and index + 1 in code)
        return code
