"""The vision projector (mmproj) through llama.cpp's mtmd, without the stock chat handler.

llama-cpp-python's `MTMDChatHandler` clears the KV cache and re-encodes every image on every
call. Here a prompt is tokenized into text tokens and image chunks, each image chunk keyed by the
image's content hash, so the slot can keep the KV prefix up to the first item that differs and
encode only new images. Budgets count an image's KV cells (`n_tokens`), not its positions
(`n_pos`, which is smaller for M-RoPE projectors such as GLM-4V and Qwen-VL).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd

from kotonia_tui.engine import native_logs
from kotonia_tui.engine.errors import ImageError, ModelFileError
from kotonia_tui.engine.formats import MEDIA_MARKER
from kotonia_tui.engine.items import ImageItem, PromptItem
from kotonia_tui.engine.types import ImageInput
from kotonia_tui.image_files import UnusableImage, decode_rgb

# Text architectures whose llama.cpp graph aborts the whole process when it is given image
# embeddings without M-RoPE positions: a GGUF converted before llama.cpp supported their images
# has no `<arch>.rope.dimension_sections`, and mtmd then feeds it plain positions.
_MROPE_FOR_IMAGES = frozenset({"glm4", "glm4moe"})


def model_architecture(model: llama_cpp.llama_model_p) -> str:
    """The text model's `general.architecture` (empty when the GGUF has none)."""
    buffer = ctypes.create_string_buffer(128)
    written = llama_cpp.llama_model_meta_val_str(
        model, b"general.architecture", buffer, ctypes.sizeof(buffer)
    )
    return buffer.value.decode("utf-8", "replace") if written >= 0 else ""


def decode_image(image: ImageInput) -> tuple[int, int, bytes]:
    """Validate and decode an image to RGB; a clear ImageError for anything unusable."""
    try:
        return decode_rgb(image.data)
    except UnusableImage as exc:
        raise ImageError(f"image {image.key[:12]}: {exc}") from exc


class Projector:
    """An mtmd context bound to the text model; lives and is used on the owner thread."""

    def __init__(
        self,
        path: Path,
        model: llama_cpp.llama_model_p,
        *,
        n_threads: int,
        model_path: Path,
    ) -> None:
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = bool(llama_cpp.llama_supports_gpu_offload())
        params.print_timings = False
        params.n_threads = n_threads
        native_logs.take_errors()
        self._ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
        if not self._ctx:
            said = "; ".join(native_logs.take_errors()) or "no reason given"
            raise ModelFileError(
                f"{path}: the projector does not fit this model or is not an mmproj GGUF "
                f"(llama.cpp: {said}); use the mmproj file published with your model"
            )
        if not mtmd.mtmd_support_vision(self._ctx):
            self.close()
            raise ModelFileError(f"{path}: this projector has no vision encoder")
        architecture = model_architecture(model)
        if architecture in _MROPE_FOR_IMAGES and not mtmd.mtmd_decode_use_mrope(self._ctx):
            self.close()
            raise ModelFileError(
                f"{model_path}: this {architecture} GGUF has no M-RoPE sections "
                f"({architecture}.rope.dimension_sections), so llama.cpp would stop the app on "
                "the first image; use a GGUF converted by a current llama.cpp, or remove "
                "mmproj_path to chat without images"
            )
        self._cells: dict[str, tuple[int, int]] = {}

    def close(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None

    @contextmanager
    def tokenize(self, text: str, images: Sequence[ImageInput]) -> Iterator[list[PromptItem]]:
        """Items of a prompt with media markers; image chunks are valid inside the block."""
        if text.count(MEDIA_MARKER) != len(images):
            raise ImageError(
                f"the prompt has {text.count(MEDIA_MARKER)} image markers but {len(images)} images"
            )
        bitmaps = [self._bitmap(image) for image in images]
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            source = text.encode("utf-8")
            input_text = mtmd.mtmd_input_text()
            input_text.text = source
            input_text.text_len = len(source)
            input_text.add_special = True
            input_text.parse_special = True
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            status = mtmd.mtmd_tokenize(
                self._ctx, chunks, ctypes.byref(input_text), array, len(bitmaps)
            )
            if status != 0:
                raise ImageError(f"the projector could not prepare the images (code {status})")
            yield self._items(chunks, images)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, image: ImageInput) -> Any:
        width, height, rgb = decode_image(image)
        buffer = (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb)
        bitmap = mtmd.mtmd_bitmap_init(width, height, buffer)
        if not bitmap:
            raise ImageError(f"image {image.key[:12]}: the projector rejected it")
        mtmd.mtmd_bitmap_set_id(bitmap, image.key.encode())
        return bitmap

    def _items(self, chunks: Any, images: Sequence[ImageInput]) -> list[PromptItem]:
        items: list[PromptItem] = []
        image_index = 0
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t()
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                items.extend(tokens[j] for j in range(count.value))
                continue
            image = images[min(image_index, len(images) - 1)]
            image_index += 1
            cells = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
            positions = int(mtmd.mtmd_input_chunk_get_n_pos(chunk))
            self._cells[image.key] = (cells, positions)
            items.append(ImageItem(image.key, cells, positions, chunk))
        return items

    def image_cells(self, image: ImageInput) -> int:
        """KV cells one image takes (cached per image key)."""
        if image.key not in self._cells:
            with self.tokenize(MEDIA_MARKER, [image]):
                pass
        return self._cells[image.key][0]

    def eval_image(
        self, item: ImageItem, ctx: llama_cpp.llama_context_p, n_past: int, n_batch: int
    ) -> int:
        """Encode an image chunk into the KV at `n_past`; returns the next position."""
        new_n_past = llama_cpp.llama_pos(0)
        status = mtmd.mtmd_helper_eval_chunk_single(
            self._ctx,
            ctx,
            item.chunk,
            llama_cpp.llama_pos(n_past),
            llama_cpp.llama_seq_id(0),
            n_batch,
            False,
            ctypes.byref(new_n_past),
        )
        if status != 0:
            raise ImageError(f"image {item.key[:12]}: encoding failed (code {status})")
        return int(new_n_past.value)
