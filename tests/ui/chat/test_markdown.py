"""The Markdown reader gives line blocks and inline runs as offsets, and copes with a reply still streaming."""
from words.markdown import inline_runs, parse_blocks


def shown(source: str) -> list[tuple[str, str]]:
    return [(b.kind, source[b.start:b.end]) for b in parse_blocks(source)]


def test_blocks_of_a_typical_answer():
    source = "Use this:\n\n```python\ndef f():\n    return 1\n```\n# Notes\n- one\n2. two\n> quoted\n---\nend"
    assert shown(source) == [("text", "Use this:"), ("code", "def f():\n    return 1"), ("heading", "Notes"),
                             ("bullet", "one"), ("number", "two"), ("quote", "quoted"), ("rule", ""),
                             ("text", "end")]
    assert [b.marker for b in parse_blocks(source) if b.marker] == ["•", "2."]


def test_an_unclosed_fence_is_code_up_to_what_has_streamed():
    blocks = parse_blocks("Here:\n```py\nx = 1\n")
    assert blocks[-1].kind == "code" and not blocks[-1].closed
    assert "Here:\n```py\nx = 1\n"[blocks[-1].start:blocks[-1].end] == "x = 1"


def test_inline_markers_are_hidden_and_unclosed_ones_stay_literal():
    source = "a **bold** and *it* with `code` but **open"
    runs = [(source[a:b], style) for a, b, style in inline_runs(source, 0, len(source))]
    assert runs == [("a ", ""), ("bold", "bold"), (" and ", ""), ("it", "italic"), (" with ", ""),
                    ("code", "code"), (" but **open", "")]
    assert inline_runs("snake_case_name", 0, 15) == [(0, 15, "")]


def test_unfenced_code_keeps_its_indentation():
    source = "def f(word):\n    return word\n\tpass"
    assert [(b.kind, b.level, source[b.start:b.end]) for b in parse_blocks(source)] == [
        ("text", 0, "def f(word):"), ("text", 4, "return word"), ("text", 4, "pass")]


def test_a_cut_line_reads_its_open_markers_as_closed():
    assert shown_runs("a **bold** but **open", cut=True) == [("a ", ""), ("bold", "bold"), (" but ", ""),
                                                             ("open", "bold")]
    assert shown_runs("see `x = 1", cut=True) == [("see ", ""), ("x = 1", "code")]


def test_a_cut_line_hides_an_opening_marker_with_nothing_after_it():
    assert shown_runs("done **", cut=True) == [("done ", "")]


def test_a_star_inside_a_word_is_no_open_marker():
    assert shown_runs("it is 2*3", cut=True) == [("it is 2*3", "")]


def shown_runs(source: str, cut: bool = False) -> list[tuple[str, str]]:
    return [(source[a:b], style) for a, b, style in inline_runs(source, 0, len(source), cut)]
