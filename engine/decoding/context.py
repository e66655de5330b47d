"""The context policy: a reply's prompt plus its token budget must fit the model's window.

The CLI and the app both decode through `Decoder.stream`, so both apply this one policy:
- the window is the smallest `max_position_embeddings` of the models decoding (positions past it are either
  undefined, for learned position embeddings, or never trained on);
- a conversation too long for the window leaves out its oldest turns (system messages stay), whole turns, until
  prompt + max_new_tokens fits; the cut then moves on in steps of about a quarter of the window, so the next turns
  keep the same first message and reuse the cached prefix instead of prefilling the whole window again;
- the token budget is cut to what the window leaves after the prompt;
- a prompt that fills the window alone, or tokenizes to nothing, is refused with the numbers.
Anything dropped or cut is reported in a ContextNotice, which the CLI prints and the app shows.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.events import ContextNotice


class ContextError(ValueError):
    """The prompt cannot be decoded at all within the window; the message is meant for the user."""


@dataclass(frozen=True)
class FittedPrompt:
    ids: list[int]
    max_new_tokens: int
    notice: ContextNotice | None  # None when nothing was dropped or cut


def require_text(text: str) -> None:
    """Refuse text that is not valid Unicode: bytes that were not UTF-8 (Python keeps them as lone surrogates
    when it decodes command-line arguments) would only fail later, inside the tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        try:
            what = f"byte 0x{char.encode('utf-8', 'surrogateescape').hex()}"
        except UnicodeEncodeError:  # a surrogate that did not come from an undecodable byte
            what = f"U+{ord(char):04X}"
        raise ContextError(f"the prompt is not valid UTF-8 text ({what} at character {exc.start})") from None


def window_of(*models) -> int | None:
    """The positions every one of these transformers models can attend to (None: no limit is configured)."""
    windows = [getattr(m.config, "max_position_embeddings", None) for m in models]
    windows = [w for w in windows if isinstance(w, int) and w > 0]
    return min(windows) if windows else None


def fit(messages: list[dict], max_new_tokens: int, window: int | None,
        tokenize: Callable[[list[dict]], list[int]]) -> FittedPrompt:
    """Token ids of `messages` and the token budget, fitted into `window` as the module docstring says."""
    ids = tokenize(messages)
    first = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    kept, dropped = list(messages), 0
    if window is not None and len(ids) + max_new_tokens > window:
        start = _first_kept(messages, first, max_new_tokens, window, tokenize)
        kept, dropped = messages[:first] + messages[start:], start - first
        if dropped:
            ids = tokenize(kept)
    if not ids:
        raise ContextError("the prompt tokenizes to no tokens at all (the model has no chat template and no "
                           "beginning-of-text token): write something")
    if window is None:
        return FittedPrompt(ids, max_new_tokens, None)
    if len(ids) >= window:
        alone = " on its own" if len(kept) - first == 1 else ""
        raise ContextError(f"the prompt is {len(ids)} tokens{alone}, but the model's window is {window} positions "
                           f"(prompt + reply): shorten it to under {window} tokens")
    budget = min(max_new_tokens, window - len(ids))
    notice = None
    if dropped or budget < max_new_tokens:
        notice = ContextNotice(window=window, prompt_tokens=len(ids), dropped_messages=dropped,
                               max_new_tokens=budget, requested_max_new_tokens=max_new_tokens)
    return FittedPrompt(ids, budget, notice)


def _first_kept(messages: list[dict], first: int, max_new_tokens: int, window: int,
                tokenize: Callable[[list[dict]], list[int]]) -> int:
    """Index of the first message kept after the system messages (messages[:first]): the start of a turn (a user
    message), never later than the last one. Of the starts late enough for the rest to fit, the first one at or past
    the next multiple of a quarter of the window, counted in tokens from the conversation's start: earlier messages
    never change, so the next turns of a growing chat keep this start (and the cache its prefix) until it no longer
    fits. The price: up to a quarter of the window more is left out than strictly needed."""
    system = messages[:first]
    turns = [i for i in range(first, len(messages)) if messages[i].get("role") == "user"]
    if not turns:
        return first
    needed = next((s for s in turns if len(tokenize(system + messages[s:])) + max_new_tokens <= window), turns[-1])
    offsets = [0]  # tokens before each message from `first` on, each message tokenized alone (stable, if rough)
    for message in messages[first:]:
        offsets.append(offsets[-1] + len(tokenize([message])))
    step = max(1, window // 4)
    anchor = -(-offsets[needed - first] // step) * step
    return next((s for s in turns if s >= needed and offsets[s - first] >= anchor), turns[-1])
