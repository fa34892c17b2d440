"""The stand-ins have the real files' layout (docs/glm-4.6v-flash.md), as llama.cpp reads it."""

from __future__ import annotations

import gguf
import llama_cpp

from tests.tiny_glm import ENDOFTEXT, GLM_SPECIAL_TOKENS, USER_TOKEN, build_glm_vocab

BLOCK_TENSORS = {
    "attn_norm.weight",
    "attn_q.weight",
    "attn_q.bias",
    "attn_k.weight",
    "attn_k.bias",
    "attn_v.weight",
    "attn_v.bias",
    "attn_output.weight",
    "post_attention_norm.weight",
    "ffn_norm.weight",
    "ffn_up.weight",
    "ffn_down.weight",
    "post_ffw_norm.weight",
}


def test_the_text_model_has_the_real_tensor_layout_and_m_rope(glm_model_path):
    reader = gguf.GGUFReader(glm_model_path)
    names = [t.name for t in reader.tensors]
    blocks = 2
    assert len(names) == 13 * blocks + 3  # 523 for the real 40 blocks
    assert {n.split(".", 2)[2] for n in names if n.startswith("blk.")} == BLOCK_TENSORS
    sections = reader.fields["glm4.rope.dimension_sections"]
    assert [int(sections.parts[i][0]) for i in sections.data] == [1, 1, 2, 0]
    llm = llama_cpp.Llama(model_path=str(glm_model_path), n_ctx=256, verbose=False)
    try:
        assert llama_cpp.llama_model_rope_type(llm.model) == llama_cpp.LLAMA_ROPE_TYPE_MROPE
        tokens = build_glm_vocab()[0]
        specials = [text for text, _ in GLM_SPECIAL_TOKENS]
        vocab = llm._model.vocab
        ends = [t for t in specials if llama_cpp.llama_vocab_is_eog(vocab, tokens.index(t))]
        assert ends == [ENDOFTEXT, USER_TOKEN]
        ids = llm.tokenize(b"[gMASK]<sop><|user|>\nHi/nothink", add_bos=True, special=True)
        assert ids[:3] == [tokens.index(t) for t in ("[gMASK]", "<sop>", USER_TOKEN)]  # no BOS
        think = tokens.index("<think>")
        assert llm._model.token_to_piece(think, special=False).rstrip(b"\0") == b"<think>"
    finally:
        llm.close()


def test_the_projector_has_the_real_tensor_layout(glm_mmproj_path):
    reader = gguf.GGUFReader(glm_mmproj_path)
    names = {t.name for t in reader.tensors}
    assert len(names) == 7 * 2 + 14  # 182 for the real 24 ViT blocks
    assert {
        "v.patch_embd.weight.1",
        "v.pre_ln.weight",
        "mm.patch_merger.weight",
        "mm.model.fc.weight",
        "mm.post_norm.bias",
        "mm.gate.weight",
    } <= names
    merger = next(t for t in reader.tensors if t.name == "mm.patch_merger.weight")
    assert list(merger.shape) == [2, 2, 32, 64]  # a 2x2 convolution to the text width
