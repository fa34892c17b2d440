"""Chat files: conversations read from and written to files (SillyTavern `.jsonl`, JSON lists).

A file format, not storage: no SQL here. The CLI and the evaluation hand what this package
reads to the store; see docs/architecture.md for where it sits among the layers.
"""

from kotonia_tui.chatfiles.errors import ImportFormatError
from kotonia_tui.chatfiles.sillytavern import ReadProgress, read_chat_file, write_sillytavern

__all__ = ["ImportFormatError", "ReadProgress", "read_chat_file", "write_sillytavern"]
