"""The tiny GGUF models load and run in the real llama-cpp-python (text and image turns).

These tests also document the low-level mtmd call sequence the engine relies on.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from llama_cpp import Llama

from tests.settings import engine_threads
from tests.tiny_models import (
    EOS_ID,
    MEDIA_MARKER,
    build_vocab,
    png_bytes,
    script_tokens,
    write_scripted_llama,
    write_tiny_llama,
    write_tiny_mmproj,
    write_tiny_png,
)

gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")
mtmd_cpp = pytest.importorskip("llama_cpp.mtmd_cpp")

# mtmd logs to stderr on its own (Llama(verbose=False) does not silence it). A ggml log callback
# installed with mtmd_log_set / mtmd_helper_log_set captures it; the ctypes callback object must
# stay referenced for the life of the process (module global here), or the next log line crashes.
MTMD_LOG: list[tuple[int, str]] = []


@llama_cpp.llama_log_callback
def _mtmd_log(level: int, text: bytes, _user_data: object) -> None:
    MTMD_LOG.append((level, text.decode(errors="replace")))
    del MTMD_LOG[:-200]


GGML_LOG_LEVEL_ERROR = 4

IMAGE_PROMPT = f"<|user|>\nWhat is in this picture? {MEDIA_MARKER}</s>\n<|assistant|>\n"


def _load(path: Path, n_ctx: int = 512) -> Llama:
    return llama_cpp.Llama(
        model_path=str(path), n_ctx=n_ctx, n_threads=engine_threads(), verbose=False
    )


@contextmanager
def _mtmd(llm: Llama, mmproj: Path) -> Iterator[int | None]:
    params = mtmd_cpp.mtmd_context_params_default()
    params.use_gpu = False
    params.print_timings = False
    params.n_threads = engine_threads()
    ctx = mtmd_cpp.mtmd_init_from_file(str(mmproj).encode(), llm.model, params)
    try:
        yield ctx
    finally:
        if ctx:
            mtmd_cpp.mtmd_free(ctx)


@contextmanager
def _chunks(ctx: int | None, text: str, images: list[bytes]) -> Iterator[int]:
    """mtmd_tokenize ``text`` (with one MEDIA_MARKER per image) into input chunks."""
    assert ctx is not None, "the projector did not load"
    bitmaps = []
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    assert chunks
    try:
        for data in images:
            buf = (ctypes.c_uint8 * len(data)).from_buffer(bytearray(data))
            bitmap = mtmd_cpp.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(data), False)
            assert bitmap, "bitmap from PNG bytes failed"
            bitmaps.append(bitmap)
        inp = mtmd_cpp.mtmd_input_text()
        encoded = text.encode()
        inp.text = encoded
        inp.text_len = len(encoded)
        inp.add_special = True  # BOS
        inp.parse_special = True  # <|user|> etc. as single control tokens
        arr = (mtmd_cpp.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        rc = mtmd_cpp.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), arr, len(bitmaps))
        assert rc == 0, f"mtmd_tokenize returned {rc}"
        yield chunks
    finally:
        mtmd_cpp.mtmd_input_chunks_free(chunks)
        for bitmap in bitmaps:
            mtmd_cpp.mtmd_bitmap_free(bitmap)


def _describe(chunks: int) -> list[tuple[int, int, int, list[int]]]:
    """(type, n_tokens, n_pos, text tokens) per chunk."""
    out = []
    for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
        chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
        kind = mtmd_cpp.mtmd_input_chunk_get_type(chunk)
        toks: list[int] = []
        if kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            ptr = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            toks = [ptr[j] for j in range(n.value)]
        out.append(
            (
                kind,
                mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk),
                mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk),
                toks,
            )
        )
    return out


def _complete(llm: Llama, prompt: str, **options: Any) -> dict[str, Any]:
    """A completion without streaming, as the plain dict llama-cpp-python returns."""
    out = llm.create_completion(prompt, stream=False, **options)
    assert isinstance(out, dict)
    return dict(out)


def _chat(llm: Llama, **options: Any) -> dict[str, Any]:
    out = llm.create_chat_completion(stream=False, **options)
    assert isinstance(out, dict)
    return dict(out)


def _greedy_continue(llm: Llama, n: int) -> list[int]:
    """Sample greedily from the logits left by the last decode, feeding tokens back."""
    out: list[int] = []
    for _ in range(n):
        tok = llm.sample(temp=0.0, top_k=1)
        out.append(tok)
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
            break
        llm.eval([tok])
    return out


# --- the writers -------------------------------------------------------------------------------


def test_writers_are_deterministic_and_small(tmp_path: Path) -> None:
    a = write_tiny_llama(tmp_path / "a.gguf")
    b = write_tiny_llama(tmp_path / "b.gguf")
    assert a.read_bytes() == b.read_bytes()
    assert write_tiny_llama(tmp_path / "c.gguf", seed=1).read_bytes() != a.read_bytes()
    m1 = write_tiny_mmproj(tmp_path / "m1.gguf")
    m2 = write_tiny_mmproj(tmp_path / "m2.gguf")
    assert m1.read_bytes() == m2.read_bytes()
    assert a.stat().st_size < 2_000_000
    assert m1.stat().st_size < 500_000


def test_metadata_readable_with_gguf_reader(tiny_model_path: Path, tiny_mmproj_path: Path):
    r = gguf.GGUFReader(str(tiny_model_path))
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["llama.embedding_length"].contents() == 64
    assert r.fields["tokenizer.ggml.eos_token_id"].contents() == EOS_ID
    assert "<|assistant|>" in r.fields["tokenizer.chat_template"].contents()
    m = gguf.GGUFReader(str(tiny_mmproj_path))
    assert m.fields["clip.projector_type"].contents() == "mlp"
    assert m.fields["clip.vision.projection_dim"].contents() == 64
    mm2 = next(t for t in m.tensors if t.name == "mm.2.weight")
    assert int(mm2.shape[1]) == 64  # ggml ne[1]: the width mtmd compares with the text n_embd


def test_png_helpers(tmp_path: Path) -> None:
    data = png_bytes((32, 32), (10, 20, 30))
    assert data.startswith(b"\x89PNG")
    p = write_tiny_png(tmp_path / "x.png", size=(8, 4), color=(1, 2, 3))
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(p) as img:
        assert img.size == (8, 4)
        assert img.convert("RGB").getpixel((0, 0)) == (1, 2, 3)


def test_favour_token_must_be_in_vocab(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not in the vocabulary"):
        write_tiny_llama(tmp_path / "x.gguf", favour_token="▁xylophone")


# --- text turns --------------------------------------------------------------------------------


def test_text_model_loads_tokenizes_and_generates(tiny_model_path: Path) -> None:
    llm = _load(tiny_model_path)
    assert llm.n_ctx() == 512
    assert llm.n_embd() == 64
    assert llm.token_bos() == 1
    assert llm.token_eos() == EOS_ID

    text = "Hello there, how are you?"
    toks = llm.tokenize(text.encode(), add_bos=True)
    assert toks[0] == 1
    # <s> ▁Hello ▁there , ▁how ▁are ▁you ?
    assert len(toks) == 8, toks
    assert llm.detokenize(toks[1:]).decode().strip() == text
    # unknown words fall back to letters / bytes, never fail
    assert len(llm.tokenize("Zyxvut ñ 日本".encode(), add_bos=False)) > 5

    # the turn markers are single control tokens when special tokens are parsed
    marked = llm.tokenize(b"<|user|>\nHi", add_bos=False, special=True)
    assert marked[0] == build_vocab()[0].index("<|user|>")

    out = _complete(llm, text, max_tokens=20, temperature=0.0)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 20

    # many sampled tokens without aborting (EOS may come up; the point is no crash)
    out = _complete(llm, text, max_tokens=300, temperature=1.0, seed=1)
    assert out["choices"][0]["finish_reason"] in {"length", "stop"}


def test_chat_template_renders_through_llama_cpp(tiny_model_path: Path) -> None:
    llm = _load(tiny_model_path)
    out = _chat(
        llm,
        messages=[
            {"role": "system", "content": "You are Mira."},
            {"role": "user", "content": "Hello!"},
        ],
        max_tokens=8,
        temperature=0.0,
    )
    assert out["choices"][0]["finish_reason"] == "length"


def test_eos_biased_model_stops_at_once(tiny_eos_model_path: Path) -> None:
    llm = _load(tiny_eos_model_path)
    out = _complete(llm, "Hello there, how are you?", max_tokens=50, temperature=0.0)
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] <= 1
    assert out["choices"][0]["text"] == ""


def test_favoured_token_repeats(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "fav.gguf", favour_token="▁hello")
    llm = _load(path)
    out = _complete(llm, "Hi", max_tokens=6, temperature=0.0)
    assert out["choices"][0]["text"] == " hello" * 6
    out = _complete(llm, "Hi", max_tokens=50, temperature=0.0, stop=["hello hello"])
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][0]["text"] == " "  # the text before the first "hello hello"


def test_suppressed_eos_never_stops(tmp_path: Path) -> None:
    llm = _load(write_tiny_llama(tmp_path / "noeos.gguf", eos_bias=-30.0))
    out = _complete(llm, "Hi", max_tokens=400, temperature=1.5, seed=7)
    assert out["choices"][0]["finish_reason"] == "length"


# --- image turns (mtmd) ------------------------------------------------------------------------


def test_image_turn_with_eval_chunks(tiny_model_path: Path, tiny_mmproj_path: Path) -> None:
    llm = _load(tiny_model_path)
    with _mtmd(llm, tiny_mmproj_path) as ctx:
        assert ctx, "mtmd_init_from_file returned NULL"
        assert mtmd_cpp.mtmd_support_vision(ctx)
        assert not mtmd_cpp.mtmd_decode_use_mrope(ctx)
        assert mtmd_cpp.mtmd_default_marker().decode() == MEDIA_MARKER
        with _chunks(ctx, IMAGE_PROMPT, [png_bytes()]) as chunks:
            parts = _describe(chunks)
            kinds = [p[0] for p in parts]
            assert kinds == [
                mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT,
                mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE,
                mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT,
            ]
            image = parts[1]
            assert image[1] == 16  # n_tokens: (32 / 8) ** 2
            assert image[2] == 16  # n_pos: the same for a non-M-RoPE model
            img_tokens = mtmd_cpp.mtmd_input_chunk_get_tokens_image(
                mtmd_cpp.mtmd_input_chunks_get(chunks, 1)
            )
            assert mtmd_cpp.mtmd_image_tokens_get_n_tokens(img_tokens) == 16
            assert (
                mtmd_cpp.mtmd_image_tokens_get_nx(img_tokens),
                mtmd_cpp.mtmd_image_tokens_get_ny(img_tokens),
            ) == (16, 1)  # the llava graph emits a flat row of 16 embeddings
            assert parts[0][3][0] == llm.token_bos()
            n_pos = mtmd_cpp.mtmd_helper_get_n_pos(chunks)
            assert n_pos == sum(p[2] for p in parts)
            assert mtmd_cpp.mtmd_helper_get_n_tokens(chunks) == sum(p[1] for p in parts)

            new_n_past = llama_cpp.llama_pos(0)
            rc = mtmd_cpp.mtmd_helper_eval_chunks(
                ctx, llm.ctx, chunks, 0, 0, llm.n_batch, True, ctypes.byref(new_n_past)
            )
            assert rc == 0
            assert new_n_past.value == n_pos
            # keep the Llama object in step with the KV cache: n_tokens is the next position.
            # input_ids for the image positions hold a placeholder (-1) so a later prefix
            # match through Llama.generate() never treats them as text.
            llm.n_tokens = new_n_past.value
            llm.input_ids[: llm.n_tokens] = -1
            pos = 0
            for _kind, _n, p, toks in parts:
                if toks:
                    llm.input_ids[pos : pos + len(toks)] = toks
                pos += p

        out = _greedy_continue(llm, 5)
        assert len(out) == 5
        assert llm.n_tokens == n_pos + 5


def test_image_turn_chunk_by_chunk_then_text_turn(
    tiny_model_path: Path, tiny_mmproj_path: Path
) -> None:
    """What the engine does: text chunks through Llama.eval (keeps input_ids and n_tokens),
    image chunks through mtmd_helper_eval_chunk_single at n_past = llm.n_tokens; then a second
    turn appends text after the image without re-evaluating anything before it."""
    llm = _load(tiny_model_path)
    with _mtmd(llm, tiny_mmproj_path) as ctx, _chunks(ctx, IMAGE_PROMPT, [png_bytes()]) as chunks:
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
            if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                llm.eval([ptr[j] for j in range(n.value)])
            else:
                before = llm.n_tokens
                new_n_past = llama_cpp.llama_pos(0)
                rc = mtmd_cpp.mtmd_helper_eval_chunk_single(
                    ctx, llm.ctx, chunk, before, 0, llm.n_batch, False, ctypes.byref(new_n_past)
                )
                assert rc == 0
                assert new_n_past.value - before == mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk)
                llm.input_ids[before : new_n_past.value] = -1
                llm.n_tokens = new_n_past.value
    after_prompt = llm.n_tokens
    reply = _greedy_continue(llm, 3)
    assert len(reply) == 3
    llm.eval([reply[-1]])
    # turn 2: only the new tokens are evaluated
    llm.eval(llm.tokenize(b"</s>\n<|user|>\nAnd now?</s>\n<|assistant|>\n", False, True))
    assert llm.n_tokens > after_prompt + 3
    assert len(_greedy_continue(llm, 3)) == 3


def test_eos_model_stops_after_image(tiny_eos_model_path: Path, tiny_mmproj_path: Path) -> None:
    llm = _load(tiny_eos_model_path)
    with _mtmd(llm, tiny_mmproj_path) as ctx, _chunks(ctx, IMAGE_PROMPT, [png_bytes()]) as chunks:
        new_n_past = llama_cpp.llama_pos(0)
        rc = mtmd_cpp.mtmd_helper_eval_chunks(
            ctx, llm.ctx, chunks, 0, 0, llm.n_batch, True, ctypes.byref(new_n_past)
        )
        assert rc == 0
        llm.n_tokens = new_n_past.value
        assert _greedy_continue(llm, 5) == [EOS_ID]


def test_misfit_mmproj_is_refused_with_null(
    tiny_model_path: Path, tiny_misfit_mmproj_path: Path
) -> None:
    """mtmd_init_from_file returns NULL (after logging "mismatch between text model (n_embd =
    64) and mmproj (n_embd = 32)"); the process does not abort. The same mismatch is visible
    beforehand in the GGUF metadata."""
    m = gguf.GGUFReader(str(tiny_misfit_mmproj_path))
    assert m.fields["clip.vision.projection_dim"].contents() == 32
    llm = _load(tiny_model_path)
    mtmd_cpp.mtmd_log_set(_mtmd_log, None)
    mtmd_cpp.mtmd_helper_log_set(_mtmd_log, None)
    MTMD_LOG.clear()
    with _mtmd(llm, tiny_misfit_mmproj_path) as ctx:
        assert ctx is None
    errors = "".join(text for level, text in MTMD_LOG if level == GGML_LOG_LEVEL_ERROR)
    assert "mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)" in errors
    # the Llama object is still usable afterwards
    out = _complete(llm, "Hello", max_tokens=3, temperature=0.0)
    assert out["choices"][0]["finish_reason"] == "length"


def test_missing_mmproj_file_is_refused_with_null(tiny_model_path: Path, tmp_path: Path) -> None:
    llm = _load(tiny_model_path)
    with _mtmd(llm, tmp_path / "nope.gguf") as ctx:
        assert not ctx


# --- scripted models ---------------------------------------------------------------------------

REFUSAL = "I cannot help with that."
CHAPTER = "Chapter text about Rowan and the harbour."
LONG_PROMPT = "The knight and the queen walked to the castle by the river. " * 40  # ~520 tokens
TEMPLATED_PROMPT = "<|system|>\nYou are Mira.</s>\n<|user|>\nSummarize that.</s>\n<|assistant|>\n"
PROMPTS = ["", "Hi", "Summarize that.", "Tell me about that.", LONG_PROMPT, TEMPLATED_PROMPT]


def test_script_tokens_are_the_tokenizers_continuation_tokens() -> None:
    vocab = build_vocab()[0]
    assert [vocab[i] for i in script_tokens(REFUSAL)] == [
        "I", "▁can", "n", "o", "t", "▁help", "▁with", "▁that", ".",
    ]  # fmt: skip
    assert [vocab[i] for i in script_tokens(" hello")] == ["▁hello"]
    with pytest.raises(ValueError, match="empty"):
        script_tokens("")


@pytest.mark.parametrize("script", [REFUSAL, CHAPTER, "the the the the cat", "Hello."])
def test_scripted_model_replies_with_the_script_after_any_prompt(
    scripted_model: Callable[[str], Path], script: str
) -> None:
    llm = _load(scripted_model(script), n_ctx=1024)
    assert len(llm.tokenize(LONG_PROMPT.encode())) > 500
    for prompt in PROMPTS:
        out = _complete(llm, prompt, max_tokens=100, temperature=0.0)
        choice = out["choices"][0]
        assert (choice["text"], choice["finish_reason"]) == (script, "stop"), prompt
        if prompt:  # (llama-cpp-python's usage for an empty prompt counts one token more)
            assert out["usage"]["completion_tokens"] == len(script_tokens(script))
    # the chat template path, twice (the second turn reuses the KV cache prefix)
    messages = [
        {"role": "system", "content": "You are Mira."},
        {"role": "user", "content": "Hello!"},
    ]
    for _ in range(2):
        out = _chat(llm, messages=messages, max_tokens=100, temperature=0.0)
        choice = out["choices"][0]
        assert choice["message"]["content"] == script
        assert choice["finish_reason"] == "stop"
        messages += [choice["message"], {"role": "user", "content": LONG_PROMPT}]
    # the script's logits lead by a wide margin, so sampling follows it too
    out = _complete(llm, "Hi", max_tokens=100, temperature=0.8, seed=5)
    assert out["choices"][0]["text"] == script


def test_scripted_model_with_stop_string_and_length(
    scripted_model: Callable[[str], Path],
) -> None:
    llm = _load(scripted_model(CHAPTER))
    out = _complete(llm, "Write.", max_tokens=100, temperature=0.0, stop=["Rowan"])
    assert (out["choices"][0]["text"], out["choices"][0]["finish_reason"]) == (
        "Chapter text about ",
        "stop",
    )
    out = _complete(llm, "Write.", max_tokens=7, temperature=0.0)
    assert (out["choices"][0]["text"], out["choices"][0]["finish_reason"]) == ("Chapter", "length")


def test_scripted_model_limit_prompt_ending_with_a_run_of_the_script(
    scripted_model: Callable[[str], Path],
) -> None:
    """The model sees only the last few tokens: a prompt that ends with a 3-token run of the
    script (or with its first token) continues the script from there."""
    llm = _load(scripted_model(REFUSAL))
    out = _complete(llm, "Go on with that.", max_tokens=100, temperature=0.0)
    assert (out["choices"][0]["text"], out["choices"][0]["finish_reason"]) == ("", "stop")


def test_scripted_model_fixture_caches_per_text(scripted_model: Callable[[str], Path]) -> None:
    assert scripted_model(REFUSAL) == scripted_model(REFUSAL)
    assert scripted_model(REFUSAL) != scripted_model(CHAPTER)


def test_scripted_model_grows_with_the_script(tmp_path: Path) -> None:
    long_script = (
        "Rowan walked down to the harbour at dawn. The ships were quiet, and the sea was grey. "
        "She thought of her brother and of the letter she had never sent."
    )
    path = write_scripted_llama(tmp_path / "long.gguf", long_script, n_layer=1)
    r = gguf.GGUFReader(str(path))
    assert r.fields["llama.embedding_length"].contents() > 64
    llm = _load(path)
    out = _complete(llm, TEMPLATED_PROMPT, max_tokens=200, temperature=0.0)
    assert (out["choices"][0]["text"], out["choices"][0]["finish_reason"]) == (long_script, "stop")


def test_ambiguous_or_conflicting_scripts_are_refused(tmp_path: Path) -> None:
    # nine "▁la" in a row: the run of 8 before the 9th and before "." is the same
    with pytest.raises(ValueError, match="repeats a run of 8 tokens"):
        write_tiny_llama(tmp_path / "la.gguf", script="la la la la la la la la la la.")
    with pytest.raises(ValueError, match="empty"):
        write_tiny_llama(tmp_path / "empty.gguf", script="")
    with pytest.raises(ValueError, match="cannot be combined"):
        write_tiny_llama(tmp_path / "eos.gguf", script=REFUSAL, eos_bias=20.0)
