"""Chat templates rendered under a time and a size limit: a template comes with the model, and one that never ends
or builds gigabytes of text must be refused in a line, not hang the load or fill the memory.

transformers renders every chat template in a jinja2 ImmutableSandboxedEnvironment; `BoundedEnvironment` is that
sandbox with limits, and this module has transformers compile chat templates with it. The clock runs from the
start of a render: every item of a `for` loop, call and output piece checks it. Sizes are checked before text is
built where one operation could build a lot at once (`*`, `+`, `%`, `**`, `~`, a width or count argument,
`replace`, `join`, format widths) and after every call, so no value much larger than MAX_CHARS is ever made.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment, safe_range
from jinja2.visitor import NodeTransformer
from transformers import PreTrainedTokenizerBase
from transformers.utils import chat_template_utils

RENDER_SECONDS = 2.0  # real templates render a conversation in milliseconds
MAX_CHARS = 1 << 22  # characters (or items) in any value or in the prompt: about a million tokens, past any window
MAX_INT_BITS = 1 << 16
# Filters and string methods whose int arguments are widths: their result can be that many times their input.
WIDENING = frozenset({"center", "indent", "ljust", "rjust", "zfill", "expandtabs", "tojson"})
FORMAT_SPEC = re.compile(r"%[^a-zA-Z%]*[a-zA-Z%]|\{[^{}]*\}")


class TemplateLimit(ValueError):
    """A render went past a limit; the message says which, and the caller names the template's source."""


@contextmanager
def refusing(source: str) -> Iterator[None]:
    """Renders inside refuse, in the one line the user reads, a chat template (of `source`, the model it came
    with) that went past a limit."""
    try:
        yield
    except TemplateLimit as exc:
        raise ValueError(f"the chat template of {source} {exc}, so it is refused: a template must render a prompt "
                         f"within {RENDER_SECONDS:g} s and {MAX_CHARS:,} characters") from None


def encode_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict], source: str) -> list[int]:
    """The prompt's ids: `messages` through the chat template of `source` (the model it came with), their text read
    as text: a control token typed or pasted into a message (<|im_start|>) is encoded as its characters, as chat
    servers do with untrusted input, and only the template's own markers are control tokens. A tokenizer without
    a template reads the messages' text joined by newlines."""
    if not tokenizer.chat_template:
        return tokenizer("\n".join(m["content"] for m in messages), split_special_tokens=True)["input_ids"]
    # A conversation that ends with the assistant's own words (the app's Continue) carries on that message rather
    # than opening a new one.
    continuing = messages[-1]["role"] == "assistant"
    with refusing(source):
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=not continuing,
                                                  continue_final_message=continuing, tokenize=True,
                                                  sanitize_control_tokens=True, return_dict=False))


def _size(value: Any, cap: int = MAX_CHARS) -> int:
    """The characters and items `value` holds, nested ones included (what its text can be made of), counted up to
    just past `cap`."""
    if isinstance(value, str):
        return len(value)
    if not isinstance(value, (list, tuple, dict)):
        return 1
    total = len(value)
    for item in (*value.keys(), *value.values()) if isinstance(value, dict) else value:
        if total > cap:
            break
        total += _size(item, cap - total)
    return total


def _check(size: int, what: str = "built") -> None:
    if size > MAX_CHARS:
        raise TemplateLimit(f"{what} more than {MAX_CHARS:,} characters")


def _checked(value: Any) -> Any:
    _check(_size(value))
    return value


def _widths(text: str) -> int:
    """The largest number inside the format specifications of `text` (%-style and {}-style): a field width."""
    return max((int(n) for spec in FORMAT_SPEC.findall(text) for n in re.findall(r"\d+", spec)), default=0)


def _precheck(name: str, args: tuple, kwargs: dict) -> None:
    """Refuse a filter or string method call (`args[0]` the string or value it acts on) whose result would be too
    large, before it is made."""
    values = [*args, *kwargs.values()]
    ints = [abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if name in WIDENING:
        _check(sum(_size(v) for v in values) * (1 + max(ints, default=0)), "would build")
    elif name == "replace" and len(args) >= 3 and all(isinstance(a, str) for a in args[:3]):
        text, old, new = args[:3]
        grows = max(0, len(new) - len(old))
        _check(len(text) + (text.count(old) if old else len(text) + 1) * grows, "would build")
    elif name == "join" and len(args) >= 2:  # the filter takes (items, separator), str.join (separator, items)
        # one separator between each two items: _size(items, 0) is their count alone
        _check(max(_size(items) + _size(separator) * _size(items, 0) for items, separator in (args[:2], args[1::-1])),
               "would build")
    elif name in ("format", "format_map") and args and isinstance(args[0], str):
        _check(_widths(args[0]), "would build")


class _Budget(threading.local):
    deadline: float | None = None  # while a render runs in this thread


_budget = _Budget()


def tick() -> None:
    if _budget.deadline is not None and time.monotonic() > _budget.deadline:
        raise TemplateLimit(f"ran for more than {RENDER_SECONDS:g} s (a loop that does not end?)")


class _Bounding(NodeTransformer):
    """Every `for` loop iterates through `bounded_iter`, and every `~` joins through `bounded_join`."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [node.iter], [], None, None,
                               lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(nodes.EnvironmentAttribute("bounded_join"), node.nodes, [], None, None, lineno=node.lineno)


class _BoundedFilters(dict):
    """The environment's filters, each wrapped in the size checks (those transformers adds after, too)."""

    def __init__(self, filters: dict):
        super().__init__()
        for name, function in filters.items():
            self[name] = function

    def __setitem__(self, name: str, function) -> None:
        @wraps(function)  # keeps jinja2's pass_context / pass_eval_context marks
        def bounded(*args, **kwargs):
            _precheck(name, args[1:] if getattr(function, "jinja_pass_arg", None) else args, kwargs)
            return _checked(function(*args, **kwargs))

        super().__setitem__(name, bounded)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.filters = _BoundedFilters(self.filters)
        self.globals["range"] = bounded_range
        self.globals.pop("lipsum", None)  # lorem ipsum by the hundred thousand paragraphs: no chat template needs it

    def _generate(self, source: nodes.Template, *args, **kwargs) -> str:
        return super()._generate(_Bounding().visit(source), *args, **kwargs)

    def concat(self, pieces: Iterable[str]) -> str:
        """A render's output (and a macro's or a block's): the clock starts with the outermost render."""
        outermost = _budget.deadline is None
        if outermost:
            _budget.deadline = time.monotonic() + RENDER_SECONDS
        try:
            kept, size = [], 0
            for piece in pieces:
                tick()
                size += len(piece)
                _check(size)
                kept.append(piece)
            return "".join(kept)
        finally:
            if outermost:
                _budget.deadline = None

    def bounded_iter(self, iterable: Iterable) -> Iterator:
        for item in iterable:
            tick()
            yield item

    def bounded_join(self, *values: Any) -> str:
        """`a ~ b`: each part as text, joined once their total size is known to be within the limit."""
        parts = [str(value) for value in values]
        _check(sum(map(len, parts)), "would build")
        return "".join(parts)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own names, kept for its kwargs
        tick()
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # the string of "…".format too
        if isinstance(owner, str):
            _precheck(getattr(__obj, "__name__", ""), (owner, *args), kwargs)
        return _checked(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        ints = isinstance(left, int) and isinstance(right, int)
        if operator == "**" and ints and right > 0:
            _check_bits(abs(left).bit_length() * right)
        elif operator == "*" and ints:
            _check_bits(abs(left).bit_length() + abs(right).bit_length())
        elif operator == "*" and (isinstance(left, int) or isinstance(right, int)):
            count, sequence = (left, right) if isinstance(left, int) else (right, left)
            _check(_size(sequence) * max(0, count), "would build")
        elif operator == "+" and not ints:
            _check(_size(left) + _size(right), "would build")
        elif operator == "%" and isinstance(left, str):
            arguments = right if isinstance(right, tuple) else (right,)
            _check(max([_widths(left), *(abs(a) for a in arguments if isinstance(a, int))]), "would build")
        return _checked(super().call_binop(context, operator, left, right))

    def getattr(self, obj: Any, attribute: str) -> Any:
        return _checked_length(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        return _checked_length(super().getitem(obj, argument))


def bounded_range(*args: int) -> range:
    """The sandbox's range, refused in our words past its MAX_RANGE numbers."""
    try:
        return safe_range(*args)
    except OverflowError:
        raise TemplateLimit(f"asked for a range of more than {MAX_RANGE:,} numbers") from None


def _checked_length(value: Any) -> Any:
    """A value read from a variable: a string or list that grew past the limit (doubled in a namespace, say)."""
    if isinstance(value, (str, list, tuple, dict)):
        _check(len(value))
    return value


def _check_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateLimit(f"would compute a number of more than {MAX_INT_BITS:,} bits")


# transformers builds the sandbox of each chat template it compiles from this name; templates compiled before are
# compiled again.
chat_template_utils.ImmutableSandboxedEnvironment = BoundedEnvironment
chat_template_utils._compile_jinja_template.cache_clear()
