"""What a file that is not a regular file is, said for a message ("a FIFO (a named pipe)").

Reading (regular_files.py) and writing (safe_files.py) refuse such a file by its kind in the
same words; the two sit side by side in the layers, so the words live here, below both.
"""

from __future__ import annotations

import stat


def kind_of(mode: int) -> str:
    """What a file with this `st_mode` is, when it is not a regular file ("a folder")."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
