"""Stop strings, thinking blocks and UTF-8 reassembly on a token stream (pure logic)."""

from __future__ import annotations

from kotonia_tui.engine.streaming import ReasoningSplitter, StopMatcher, Utf8Stream


def feed_all(matcher: StopMatcher, pieces: list[str]) -> str:
    out = "".join(matcher.feed(p) for p in pieces)
    return out + matcher.flush()


def test_stop_string_split_across_tokens_is_caught_and_not_shown():
    matcher = StopMatcher(("\nTom:",))
    shown = feed_all(matcher, ["Hello", " there.", "\n", "To", "m", ":", " hi"])
    assert shown == "Hello there."
    assert matcher.stopped_by == "\nTom:"


def test_text_that_only_looks_like_a_stop_start_is_released():
    matcher = StopMatcher(("\nTom:",))
    assert matcher.feed("a\nT") == "a"
    assert matcher.feed("oast") == "\nToast"
    assert matcher.flush() == ""
    assert matcher.stopped_by is None


def test_earliest_of_several_stops_wins():
    matcher = StopMatcher(("\nB:", "\nA:"))
    assert feed_all(matcher, ["x\nA: y\nB: z"]) == "x"
    assert matcher.stopped_by == "\nA:"


def test_thinking_block_is_kept_apart_even_when_tags_are_split():
    splitter = ReasoningSplitter("<think>", "</think>")
    reply, reasoning = [], []
    for piece in ["<th", "ink>plan the ", "answer</thi", "nk>\n\nHello", " there"]:
        r, t = splitter.feed(piece)
        reply.append(r)
        reasoning.append(t)
    r, t = splitter.flush()
    reply.append(r)
    reasoning.append(t)
    assert "".join(reply) == "Hello there"
    assert "".join(reasoning) == "plan the answer"


def test_template_that_opens_the_block_in_the_prompt():
    splitter = ReasoningSplitter("<think>", "</think>", starts_inside=True)
    reply, reasoning = splitter.feed("weighing it</think>Sure.")
    assert (reply, reasoning) == ("Sure.", "weighing it")


def test_unclosed_thinking_never_leaks_into_the_reply():
    splitter = ReasoningSplitter("<think>", "</think>")
    reply, _ = splitter.feed("<think>still thinking when the cap hit")
    tail_reply, _ = splitter.flush()
    assert reply == "" and tail_reply == ""
    assert "".join(splitter.reasoning) == "still thinking when the cap hit"


def test_multibyte_characters_split_across_tokens():
    stream = Utf8Stream()
    data = "猫は「こんにちは」".encode()
    text = "".join(stream.feed(data[i : i + 1]) for i in range(len(data))) + stream.flush()
    assert text == "猫は「こんにちは」"
