"""Write a BERT sentence-embedding model (Hugging Face layout) as a GGUF for semantic recall.

For users who have the weights of a BERT-architecture sentence-embedding model (for example
BAAI/bge-small-en-v1.5) and want it as `embedding_model_path` instead of the shipped
all-MiniLM-L6-v2, which the app converts itself:

    .venv/bin/python scripts/bert_to_gguf.py MODEL_DIR OUT.gguf [--outtype f16|f32]

MODEL_DIR holds `config.json` (model_type "bert"), `model.safetensors`, `vocab.txt` and
`tokenizer.json`, and, for a sentence-transformers model, `1_Pooling/config.json` (mean or CLS
pooling; mean when absent, which is what these models are trained with). No weights are in
this repository, and nothing is downloaded: the script reads only MODEL_DIR.

The conversion is the app's own (kotonia_tui/engine/bert_gguf.py); its docstring says what is
written.

Exit 1 with one line naming the file or field when MODEL_DIR cannot be converted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kotonia_tui.engine.bert_gguf import ConvertError, convert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="folder with config.json, model.safetensors")
    parser.add_argument("out", type=Path, help="the GGUF file to write")
    parser.add_argument("--outtype", choices=("f16", "f32"), default="f16")
    args = parser.parse_args(argv)
    try:
        count = convert(args.model_dir, args.out, args.outtype)
    except (ConvertError, OSError) as exc:
        print(f"bert_to_gguf: {exc}", file=sys.stderr)
        return 1
    size = args.out.stat().st_size / 1e6
    print(f"wrote {args.out} ({count} tensors, {size:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
