"""Sampling under a grammar the way llama.cpp's common sampler does it: check the chosen token.

A grammar sampler first in the chain checks every token of the vocabulary at every step, and
with Gemma's 262k tokens that check costs more than the model's own step. Most of the time the
token the model would pick anyway is one the grammar allows, so: sample as usual, check only
that token against the grammar, and only when it is rejected apply the grammar to every
candidate and sample again from what is left. Every accepted token has passed the grammar, so
the reply follows the schema exactly as before (and ends only where the schema may end).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np  # llama-cpp-python's own dependency: its token arrays are numpy records
from llama_cpp import _internals as internals
from llama_cpp.llama_grammar import LlamaGrammar


class GrammarSampler:
    """The chain (penalties, then greedy or top-k/top-p/min-p/temperature/dist) with a JSON
    schema's grammar checked on the chosen token. Owner thread only, like the context."""

    def __init__(
        self, chain: internals.LlamaSampler, model: internals.LlamaModel, schema: str
    ) -> None:
        self._chain = chain
        self._grammar = internals.LlamaSampler()
        self._grammar.add_grammar(model, LlamaGrammar.from_json_schema(schema, verbose=False))
        self._n_vocab = int(model.n_vocab())
        self._all = internals.LlamaTokenDataArray(n_vocab=self._n_vocab)
        self._one_data = (llama_cpp.llama_token_data * 1)()
        self._one = llama_cpp.llama_token_data_array(
            data=self._one_data, size=1, selected=-1, sorted=False
        )
        self.steps = 0
        self.resampled = 0  # steps whose first choice the grammar rejected

    def sample(self, ctx: internals.LlamaContext) -> int:
        """The next token (of the last evaluated position), accepted by the grammar and the
        chain, as `llama_sampler_sample` accepts it."""
        pointer = llama_cpp.llama_get_logits_ith(ctx.ctx, -1)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        token = self._pick(logits, constrained=False)
        if not self._allowed(token, float(logits[token])):
            self.resampled += 1
            token = self._pick(logits, constrained=True)
        self.steps += 1
        self._grammar.accept(token)
        self._chain.accept(token)
        return token

    def _allowed(self, token: int, logit: float) -> bool:
        self._one_data[0] = llama_cpp.llama_token_data(id=token, logit=logit, p=0.0)
        self._one.size = 1
        self._one.selected = -1
        self._one.sorted = False
        llama_cpp.llama_sampler_apply(self._grammar.sampler, ctypes.byref(self._one))
        return bool(np.isfinite(self._one_data[0].logit))

    def _pick(self, logits: np.ndarray, *, constrained: bool) -> int:
        self._all.copy_logits(logits)
        candidates = self._all.candidates
        candidates.selected = -1
        if constrained:  # every token the grammar rejects gets -inf, then the chain chooses
            llama_cpp.llama_sampler_apply(self._grammar.sampler, ctypes.byref(candidates))
        llama_cpp.llama_sampler_apply(self._chain.sampler, ctypes.byref(candidates))
        # `selected` indexes the array as the chain left it (sorted, cut), not the vocabulary.
        return int(candidates.data[candidates.selected].id)

    def close(self) -> None:
        self._grammar.close()
        self._chain.close()
