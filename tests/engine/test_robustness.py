"""Nothing garbled, nothing hangs, nothing lost: text across tokens, the context policy, chunked prefill, bad input
and other architectures, each followed by a request that must still work."""
from __future__ import annotations

import math

import pytest
import torch

from engine.decoding.caches import FIRST_CHUNK, MAX_CHUNK, PREFILL_CHUNK_S, chunk_size
from engine.decoding.context import ContextError
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.decoding.sampling import warp
from engine.decoding.text import TextStream, left_out_note
from engine.events import ContextNotice, DecodeSettings, PrefillProgress, RoundEvent
from engine.models.loading import LoadedModel
from tests.chain import CHAIN_TEXT, byte_tokenizer, chain_ids, chain_model
from tests.tiny import PROMPT, WORDS, tiny_decoder, tiny_tokenizer

HI = [{"role": "user", "content": "hi"}]


def emitted(events) -> list:
    return [t for e in events if isinstance(e, RoundEvent) for t in e.emitted]


def long_prompt(n_words: int) -> list[dict]:
    return [{"role": "user", "content": " ".join(WORDS[2 + i % 62] for i in range(n_words))}]


# -- 1. per-token text ------------------------------------------------------------------------------------


def test_each_character_is_carried_by_the_token_that_completes_it():
    tokenizer = byte_tokenizer()
    stream = TextStream(tokenizer)
    texts = [stream.push(t) for t in chain_ids(tokenizer) + [tokenizer.eos_token_id]]
    assert [t for t in texts if t] == list(CHAIN_TEXT)  # one piece per character, none garbled
    assert texts[:4] == ["", "", "", "🐉"]  # 🐉 is 4 bytes, 4 tokens
    assert texts[-1] == ""  # <|im_end|> is special: no text


def test_an_incomplete_character_at_the_end_is_left_out_and_peek_consumes_nothing():
    tokenizer = byte_tokenizer()
    first_bytes = chain_ids(tokenizer)[:2]  # half of 🐉
    stream = TextStream(tokenizer)
    assert [stream.push(t) for t in first_bytes] == ["", ""]
    assert stream.peek(chain_ids(tokenizer)[2]) == "\ufffd"  # still incomplete, shown as such for a rejected draft
    assert stream.label(tokenizer.eos_token_id) == "<|im_end|>"  # candidates name a special token...
    assert stream.label(chain_ids(tokenizer)[2]) == "‹90›"  # ...and the bytes of a piece of a character
    assert stream.flush() == ""  # never '�'; the note names the bytes left out
    assert stream.left_out == ("the reply ended part-way through a character: only 2 of its 4 UTF-8 bytes were "
                               "written (f0 9f), too few to make the character, so they were left out of the text")


def test_the_note_on_a_cut_character_says_in_words_how_many_of_its_bytes_came():
    assert left_out_note(bytes([0xE7])) == ("the reply ended part-way through a character: only 1 of its 3 UTF-8 bytes "
                                            "was written (e7), too few to make the character, so it was left out of "
                                            "the text")
    assert "only some of its UTF-8 bytes were written" in left_out_note(None)  # a tokenizer without byte spelling


def test_whole_characters_before_an_incomplete_one_are_flushed():
    tokenizer = byte_tokenizer()
    stream = TextStream(tokenizer)
    ids = tokenizer("ab", add_special_tokens=False)["input_ids"] + chain_ids(tokenizer)[:3]  # 'ab', 3 bytes of 🐉
    texts = [stream.push(t) for t in ids]
    assert "".join(texts) + stream.flush() == "ab" and "3 of its 4 UTF-8 bytes were written (f0 9f 90)" in stream.left_out


def test_a_reply_that_ends_on_a_whole_character_leaves_nothing_out():
    tokenizer = byte_tokenizer()
    stream = TextStream(tokenizer)
    assert "".join(stream.push(t) for t in chain_ids(tokenizer)[:4]) + stream.flush() == "🐉"
    assert stream.left_out is None


def test_replies_across_multi_byte_characters_are_never_garbled_in_ar_or_speculative_mode():
    tokenizer = byte_tokenizer()
    chain = chain_ids(tokenizer)
    target = chain_model(tokenizer, chain)
    wrong = list(chain)
    wrong[5] = tokenizer("x", add_special_tokens=False)["input_ids"][0]  # the draft gets 日's second byte wrong
    draft = chain_model(tokenizer, wrong)
    for decoder, mode in ((Decoder(target), "ar"), (Decoder(target, DraftModelDrafter(draft, len(tokenizer)), draft),
                                                    "spec")):
        events = list(decoder.generate(HI, DecodeSettings(mode=mode, cost_aware=False, stop_below=0.0)))
        tokens = emitted(events)
        assert "".join(t.text for t in tokens) == "".join(e.text_delta for e in events) == CHAIN_TEXT
        assert [t.text for t in tokens if t.text] == list(CHAIN_TEXT)
        assert events[-1].finish_reason == "eos" and tokens[-1].text == ""  # no literal <|im_end|>
    rejected = [d for e in events for d in e.drafted if not d.accepted]
    # read after the accepted prefix: the held-back first byte of 日, then 'x'
    assert rejected and rejected[0].text == "\ufffdx"


def chain_decoder(chain: list[int], mode: str) -> Decoder:
    tokenizer = byte_tokenizer()
    target = chain_model(tokenizer, chain)
    if mode == "ar":
        return Decoder(target)
    draft = chain_model(tokenizer, chain)
    return Decoder(target, DraftModelDrafter(draft, len(tokenizer)), draft)


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_a_reply_cut_at_max_new_tokens_inside_a_character_leaves_its_bytes_out(mode):
    decoder = chain_decoder(chain_ids(byte_tokenizer()), mode)
    events = list(decoder.generate(HI, DecodeSettings(mode=mode, max_new_tokens=6, stop_below=0.0)))
    assert events[-1].finish_reason == "length" and len(emitted(events)) == 6  # 日 cut after 2 of its 3 bytes
    assert "".join(e.text_delta for e in events) == "🐉"
    assert all("\ufffd" not in t.text for t in emitted(events))
    assert events[-1].text_notice.startswith("the reply ended part-way through a character")  # and it says so
    again = list(decoder.generate(HI, DecodeSettings(mode=mode, stop_below=0.0)))  # the next reply is whole
    assert "".join(e.text_delta for e in again) == CHAIN_TEXT and again[-1].text_notice is None


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_a_reply_ended_by_eos_inside_a_character_leaves_its_bytes_out(mode):
    decoder = chain_decoder(chain_ids(byte_tokenizer())[:6], mode)  # spells 🐉 and 2 bytes of 日, then EOS
    events = list(decoder.generate(HI, DecodeSettings(mode=mode, stop_below=0.0)))
    assert events[-1].finish_reason == "eos" and "".join(e.text_delta for e in events) == "🐉"


# -- 2. the context policy -------------------------------------------------------------------------------


def test_a_prompt_longer_than_the_window_is_refused_with_the_numbers_and_the_next_request_works():
    decoder = tiny_decoder()
    with pytest.raises(ContextError, match=r"the prompt is 1100 tokens .*window is 1024 positions"):
        list(decoder.generate(long_prompt(1100), DecodeSettings()))
    assert len(emitted(decoder.generate(PROMPT, DecodeSettings(max_new_tokens=5)))) == 5


def test_max_new_tokens_is_cut_to_the_window_with_a_notice():
    decoder = tiny_decoder(draft_seed=None)
    decoder.eos_ids = set()
    items = list(decoder.stream(long_prompt(1000), DecodeSettings(mode="ar", max_new_tokens=100_000)))
    notice = items[0]
    assert isinstance(notice, ContextNotice)
    assert (notice.window, notice.prompt_tokens, notice.max_new_tokens, notice.dropped_messages) == (1024, 1000, 24, 0)
    assert "cut the reply to at most 24 new tokens (asked for 100000)" in notice.message
    assert len(emitted(items)) == 24


def test_a_long_conversation_drops_its_oldest_turns_with_a_notice_and_keeps_the_system_message():
    decoder = tiny_decoder()
    decoder.eos_ids = set()
    turn = " ".join(["w5"] * 100)
    messages = [{"role": "system", "content": "w1"}]
    for _ in range(6):
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": turn}]
    messages.append({"role": "user", "content": "w3 w4"})
    seen = []
    chat_ids = decoder.chat_ids
    decoder.chat_ids = lambda kept: seen.append(kept) or chat_ids(kept)
    items = list(decoder.stream(messages, DecodeSettings(max_new_tokens=150)))
    notice = items[0]
    assert isinstance(notice, ContextNotice) and notice.dropped_messages % 2 == 0  # whole turns
    assert f"left out the oldest {notice.dropped_messages} messages" in notice.message
    kept = seen[-1]
    assert kept[0]["role"] == "system" and kept[1]["role"] == "user" and kept[-1]["content"] == "w3 w4"
    assert len(kept) == len(messages) - notice.dropped_messages
    assert notice.prompt_tokens + 150 <= 1024 and len(emitted(items)) == 150


def test_a_growing_conversation_keeps_its_first_kept_message_for_several_turns():
    from engine.decoding.context import fit

    decoder = tiny_decoder()
    turn = " ".join(["w5"] * 60)
    messages, starts = [], []
    for _ in range(40):
        messages += [{"role": "user", "content": turn}]
        fitted = fit(messages, 100, 1024, decoder.chat_ids)
        assert len(fitted.ids) + fitted.max_new_tokens <= 1024 and fitted.max_new_tokens == 100
        dropped = fitted.notice.dropped_messages if fitted.notice else 0
        starts.append(dropped)
        assert messages[dropped]["role"] == "user"
        messages += [{"role": "assistant", "content": turn}]
    changes = [i for i in range(1, len(starts)) if starts[i] != starts[i - 1]]
    assert starts == sorted(starts) and len(changes) >= 3  # the cut moves on as the chat grows...
    assert min(b - a for a, b in zip(changes, changes[1:])) >= 2  # ...but not every turn: the prefix is reused


def test_drafting_never_reaches_past_the_window():
    # GPT-2 has learned positions: a draft past n_positions would index out of range
    decoder = gpt_decoder(gpt2_model, window=40)
    always = DecodeSettings(gamma=8, max_new_tokens=1000, cost_aware=False, stop_below=0.0)  # γ drafts every round
    events = list(decoder.generate(PROMPT, always))
    assert len(emitted(events)) == 40 - len(decoder.chat_ids(PROMPT))


def test_a_prompt_of_no_tokens_is_a_clear_error_and_the_next_request_works():
    decoder = tiny_decoder()
    with pytest.raises(ContextError, match="tokenizes to no tokens"):
        list(decoder.generate([{"role": "user", "content": ""}], DecodeSettings()))
    assert emitted(decoder.generate(PROMPT, DecodeSettings(max_new_tokens=3)))


def test_text_that_is_not_utf8_is_refused_before_tokenizing():
    decoder = tiny_decoder()
    with pytest.raises(ContextError, match="not valid UTF-8 text \\(byte 0xff at character 3\\)"):
        list(decoder.generate([{"role": "user", "content": "w3 \udcff"}], DecodeSettings()))
    assert emitted(decoder.generate(PROMPT, DecodeSettings(max_new_tokens=3)))


# -- 3. chunked prefill -----------------------------------------------------------------------------------


def known_speed(decoder: Decoder, positions: int) -> None:
    """Make the target's prefill clock read as a machine that reads `positions` per PREFILL_CHUNK_S: it advances
    with the positions the cache holds, so chunk sizes do not depend on this machine's load."""
    runner = decoder.runner
    runner.clock = lambda: len(runner) * PREFILL_CHUNK_S / positions


def test_a_chunk_size_is_the_largest_power_of_two_that_fits_the_time():
    assert chunk_size(None) == FIRST_CHUNK  # nothing timed yet
    assert chunk_size(PREFILL_CHUNK_S / 300) == 256
    assert chunk_size(PREFILL_CHUNK_S / 256.5) == 256
    assert chunk_size(PREFILL_CHUNK_S / 255.5) == 128
    assert chunk_size(1.0) == 1  # even one position takes longer than the chunk time
    assert chunk_size(1e-9) == MAX_CHUNK


def test_prefill_runs_in_chunks_reporting_progress():
    decoder = tiny_decoder()
    known_speed(decoder, 300)
    items = list(decoder.stream(long_prompt(700), DecodeSettings(max_new_tokens=4)))
    progress = [i for i in items if isinstance(i, PrefillProgress)]
    # the first chunk before anything was timed, then 256 positions (what fits), ending at multiples of 256
    assert [(p.done, p.total) for p in progress] == [(8, 699), (256, 699), (512, 699), (699, 699)]
    assert len(emitted(items)) == 4


@pytest.mark.parametrize("positions", [40, 300, 5000])
def test_each_prefill_chunk_takes_at_most_the_chunk_time_at_the_measured_speed(positions):
    decoder = tiny_decoder()
    known_speed(decoder, positions)
    chunks = []
    for item in decoder.stream(long_prompt(900), DecodeSettings(max_new_tokens=1)):
        if isinstance(item, PrefillProgress):
            chunks.append(decoder.runner.last_chunk)
    assert sum(n for n, _ in chunks) == 899
    assert all(seconds <= PREFILL_CHUNK_S for _, seconds in chunks)
    assert max(n for n, _ in chunks) == min(chunk_size(PREFILL_CHUNK_S / positions), 899 - FIRST_CHUNK)


def test_a_machine_that_slows_down_mid_prefill_gets_smaller_chunks():
    decoder = tiny_decoder()
    runner = decoder.runner
    # 300 positions per chunk time up to position 256, then ten times slower
    runner.clock = lambda: (min(len(runner), 256) + 10 * max(len(runner) - 256, 0)) * PREFILL_CHUNK_S / 300
    sizes = []
    for item in decoder.stream(long_prompt(900), DecodeSettings(max_new_tokens=1)):
        if isinstance(item, PrefillProgress):
            sizes.append(runner.last_chunk[0])
    assert sizes[:3] == [8, 248, 256]  # the first slow chunk was sized on the fast speed...
    assert sizes[3:] == [16] * 24 + [3]  # ...and every one after it on the slow one (30 positions per chunk time)


def test_closing_the_stream_during_prefill_stops_within_one_chunk_and_the_next_reply_is_right():
    decoder = tiny_decoder()
    stream = decoder.stream(long_prompt(900), DecodeSettings(max_new_tokens=8))
    assert isinstance(next(stream), PrefillProgress)
    stream.close()
    assert len(decoder.runner) == decoder.runner.last_chunk[0] == FIRST_CHUNK
    assert decoder.drafter.cached_length() == FIRST_CHUNK
    resumed = [t.token_id for t in emitted(decoder.stream(long_prompt(900), DecodeSettings(max_new_tokens=8)))]
    fresh = [t.token_id for t in emitted(tiny_decoder().stream(long_prompt(900), DecodeSettings(max_new_tokens=8)))]
    assert resumed == fresh


def test_ar_and_speculative_mode_prefill_the_target_in_the_same_chunks():
    sizes = {}
    for mode in ("ar", "spec"):
        decoder = tiny_decoder()
        known_speed(decoder, 300)
        forward = decoder.runner.cache.forward
        calls = sizes[mode] = []
        decoder.runner.cache.forward = lambda ids, keep, calls=calls, forward=forward: calls.append(len(ids)) or \
            forward(ids, keep)
        next(emitted_tokens(decoder.generate(long_prompt(600), DecodeSettings(mode=mode, max_new_tokens=1))))
        del calls[4:]  # the rounds after the prefill differ by design
    assert sizes["ar"] == sizes["spec"] == [8, 248, 256, 87]


def emitted_tokens(events):
    for event in events:
        yield from event.emitted


def test_the_draft_catches_up_in_chunks_after_plain_ar_turns():
    decoder = tiny_decoder()
    messages = long_prompt(600)
    list(decoder.generate(messages, DecodeSettings(mode="ar", max_new_tokens=2)))
    items = list(decoder.stream(messages, DecodeSettings(mode="spec", max_new_tokens=4)))
    assert [p.done for p in items if isinstance(p, PrefillProgress)] == [256, 512, 599]
    assert len(emitted(items)) == 4


# -- 4. bad numbers and sampling edges --------------------------------------------------------------------


@pytest.mark.parametrize("field", ["temperature", "top_p", "stop_below"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_settings_are_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a finite number"):
        DecodeSettings(greedy=False, **{field: value})


def test_top_p_at_an_exact_boundary_keeps_what_transformers_keeps():
    from transformers.generation.logits_process import TopPLogitsWarper

    logits = torch.log(torch.tensor([0.3, 0.1, 0.1, 0.5]))
    probs = warp(logits, DecodeSettings(greedy=False, top_p=0.8))
    assert (probs > 0).tolist() == [True, False, False, True]
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        vocab = int(torch.randint(2, 12, (), generator=generator))
        logits = torch.randn(vocab, generator=generator) * 3
        logits[torch.rand(vocab, generator=generator) < 0.2] = logits.max()  # ties with the top
        top_p = float(torch.rand((), generator=generator))
        expected = TopPLogitsWarper(top_p)(None, logits[None])[0] > float("-inf")
        assert torch.equal(warp(logits, DecodeSettings(greedy=False, top_p=max(top_p, 1e-6))) > 0, expected)


# -- 5. any causal LM through the transformers fallback ---------------------------------------------------


def gpt2_model(seed: int, layers: int, window: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(WORDS), n_positions=window, n_embd=32, n_layer=layers,
                                      n_head=4, eos_token_id=1, bos_token_id=None, initializer_range=0.3))


def neox_model(seed: int, layers: int, window: int):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(WORDS), max_position_embeddings=window, hidden_size=32,
                                            intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                                            eos_token_id=1, bos_token_id=None))


def gpt_decoder(make, window: int = 256) -> Decoder:
    target, draft = (LoadedModel(f"m{seed}", f"m{seed}", make(seed, layers, window).eval(), tiny_tokenizer())
                     for seed, layers in ((0, 2), (1, 1)))
    decoder = Decoder(target, DraftModelDrafter(draft, target.vocab_size), draft)
    decoder.eos_ids = set()
    return decoder


@pytest.mark.parametrize("make", [gpt2_model, neox_model], ids=["gpt2", "gpt-neox"])
def test_models_without_the_fast_path_decode_through_transformers_in_both_modes(make):
    from engine.decoding.caches import TransformersCache

    decoder = gpt_decoder(make)
    assert isinstance(decoder.runner.cache, TransformersCache)
    ar = [t.token_id for t in emitted(decoder.generate(PROMPT, DecodeSettings(mode="ar", max_new_tokens=30)))]
    ids = decoder.chat_ids(PROMPT)
    reference = decoder.target.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                              dtype=torch.long), max_new_tokens=30, do_sample=False,
                                              eos_token_id=None, pad_token_id=0)
    assert ar == reference[0, len(ids):].tolist()
    fixed = DecodeSettings(gamma=4, max_new_tokens=30, cost_aware=False, stop_below=0.0)  # γ drafts every round
    events = list(decoder.generate(PROMPT, fixed))
    assert any(not d.accepted for e in events for d in e.drafted)  # rollbacks happened
    assert [t.token_id for t in emitted(events)] == ar
    sampled = list(decoder.generate(PROMPT, DecodeSettings(greedy=False, gamma=4, max_new_tokens=30)))
    assert len(emitted(sampled)) == 30


def test_a_loaded_model_keeps_its_own_layers_rather_than_kernels_fetched_from_the_hub(tmp_path):
    from transformers import AutoModelForCausalLM

    from engine.models.loading import load_model

    tiny = tiny_decoder(draft_seed=None).target
    tiny.model.save_pretrained(tmp_path / "m")
    tiny.tokenizer.save_pretrained(tmp_path / "m")
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "m").use_kernels  # transformers' default: hub kernels
    assert not load_model(str(tmp_path / "m"), torch.device("cpu"), torch.float32).model.use_kernels


def test_each_read_in_report_carries_its_chunk_and_the_time_measured_so_far():
    decoder = tiny_decoder()
    items = [p for p in decoder.stream(long_prompt(900), DecodeSettings(max_new_tokens=1))
             if isinstance(p, PrefillProgress)]
    assert len(items) >= 2
    done = 0
    for item in items:
        assert (item.start, item.chunk) == (0, item.done - done) and item.chunk_s > 0
        done = item.done
    assert [p.read_s for p in items] == pytest.approx([sum(p.chunk_s for p in items[: i + 1])
                                                       for i in range(len(items))])
    assert items[0].seconds_left is not None and items[-1].seconds_left is None  # the last: nothing left


def test_a_read_in_after_a_cached_prefix_starts_where_the_cache_ends():
    decoder = tiny_decoder()
    list(decoder.generate(long_prompt(300), DecodeSettings(mode="ar", max_new_tokens=1)))
    cached = len(decoder.runner)
    longer = long_prompt(300)[0]["content"] + " " + " ".join(WORDS[i % len(WORDS)] for i in range(600))
    first = next(p for p in decoder.stream([{"role": "user", "content": longer}],
                                           DecodeSettings(mode="ar", max_new_tokens=1))
                 if isinstance(p, PrefillProgress))
    assert 0 < first.start <= cached and first.chunk == first.done - first.start


def test_the_time_left_is_the_rest_at_the_rate_measured_and_none_before_a_chunk_is_timed():
    assert PrefillProgress(0, 4096).seconds_left is None
    # 1,024 read in 4 s, the last 256 of them in 1 s: as fast as the 768 before, so the rest at that rate
    assert PrefillProgress(1024, 4096, 0, 4.0, 256, 1.0).seconds_left == pytest.approx(12.0)
    # from an earlier reply's cached 512 on, at a steady rate
    assert PrefillProgress(1024, 4096, 512, 2.0, 256, 1.0).seconds_left == pytest.approx(12.0)
    # a last chunk faster than those before it (or the only one) is taken as the rate: never less, never negative
    assert PrefillProgress(1024, 4096, 0, 3.5, 256, 0.5).seconds_left == pytest.approx(6.0)
    assert PrefillProgress(256, 4096, 0, 1.0, 256, 1.0).seconds_left == pytest.approx(15.0)


def test_later_chunks_dearer_make_the_rest_dearer_still_but_no_faster_than_in_proportion_to_the_position():
    # the last chunk 1.5× the rate of the 768 before it: the cost per position grows in a line through both,
    # (1.5 + 0.5 × (2560 − 896) / 512) / 256 s at the rest's middle
    assert PrefillProgress(1024, 4096, 0, 4.5, 256, 1.5).seconds_left == pytest.approx(37.5)
    # a stalled last chunk (10×) grows no faster than its position: 10/256 s × 2560/896 at the rest's middle
    assert PrefillProgress(1024, 4096, 0, 13.0, 256, 10.0).seconds_left == pytest.approx(3072 * 10 / 256 * 2560 / 896)
