"""The links in the chat pane, readable without Qt: what each link's href names (a token, a guide example, an
action on a reply, a message's or a comparison's fold, a code block's Copy) and the links drawn under a reply.
ui/chat/view.py draws them and reads a clicked one back."""
from __future__ import annotations

from engine.events import DecodeSettings

TOKEN_SCHEME = "token"  # token:<index into Transcript.spans>
EXAMPLE_SCHEME = "example"  # example:<index into chat_guide.EXAMPLES>
ACTION_SCHEME = "action"  # action:<name in ACTIONS>:<the reply's turn>
CODE_SCHEME = "code"  # a code block's Copy link: code:<the reply's first span>:<the block's index among its blocks>
# a long user message's Show all / Fold link: fold:<item index>; a comparison's link to plain AR's text where the
# texts agree: fold:<the reply's item index>:<the comparison's index among its notes>
FOLD_SCHEME = "fold"


def token_href(index: int) -> str:
    return f"{TOKEN_SCHEME}:{index}"


def token_index(href: str) -> int | None:
    """The span a token's href stands for (None for any other link, or none)."""
    scheme, _, index = href.partition(":")
    return int(index) if scheme == TOKEN_SCHEME else None


def action_href(name: str, turn: int | None) -> str:
    return f"{ACTION_SCHEME}:{name}:{turn}"


def fold_href(item_index: int, note_index: int | None = None) -> str:
    return f"{FOLD_SCHEME}:{item_index}" + ("" if note_index is None else f":{note_index}")


def code_href(first: int, block: int) -> str:
    return f"{CODE_SCHEME}:{first}:{block}"


def continue_reach(max_new_tokens: int) -> str:
    """How far a Continue goes: it asks for max tokens again, so the joined reply can run past them."""
    return f"up to {max_new_tokens} more tokens"


def continue_link(max_new_tokens: int) -> tuple[str, str]:
    """The Continue link's text and tooltip."""
    reach = continue_reach(max_new_tokens)
    return f"Continue ({reach})", f"Let the model carry on this reply where it stopped, for {reach} (Ctrl+Shift+Enter)"


# The links under a reply (name: text, tooltip), in this order; the window's menus have the same actions. Continue's
# names the default max tokens until the window says its own (ChatView.set_continue_reach).
ACTIONS = {
    "copy": ("Copy", "Copy this reply's text (Ctrl+Shift+C for the last reply)"),
    "edit": ("Edit message", "Put the message this reply answers back in the box; sending it replaces this turn and "
                             "what followed (Ctrl+Shift+E for the last message)"),
    "regenerate": ("Regenerate", "Decode this reply again with the current settings (Ctrl+R)"),
    "continue": continue_link(DecodeSettings().max_new_tokens),
}
LAST_REPLY_ONLY = ("regenerate", "continue")
