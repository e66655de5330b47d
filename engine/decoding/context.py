"""The context policy: a reply's prompt plus its token budget must fit the model's window.

The CLI and the app both decode through `Decoder.stream`, so both apply this one policy:
- the window is the smallest `max_position_embeddings` of the models decoding (positions past it are either
  undefined, for learned position embeddings, or never trained on);
- a conversation too long for the window leaves out its oldest turns (system messages stay), a whole turn at a
  time, until prompt + max_new_tokens fits;
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
    dropped = 0
    kept = list(messages)
    first = next((i for i, m in enumerate(kept) if m.get("role") != "system"), len(kept))
    while window is not None and len(ids) + max_new_tokens > window and _has_earlier_turn(kept, first):
        turn_end = next(i for i in range(first + 1, len(kept)) if kept[i].get("role") == "user")
        dropped += turn_end - first
        del kept[first:turn_end]
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


def _has_earlier_turn(messages: list[dict], first: int) -> bool:
    """Whether a user message follows messages[first], i.e. the turn at `first` is not the one being answered."""
    return any(m.get("role") == "user" for m in messages[first + 1:])
