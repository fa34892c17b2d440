"""The copies of a conversation kept outside its rows, and removing them when it goes.

A conversation's text is in its rows (messages, chapters, the search index, vectors: the
foreign keys take them along) and, outside the database, in the saved KV states of the cache
dir: the conversation's own (its prompt's token ids are in the file's header, and
detokenizing them gives the text back) and the character setup's, shared by every
conversation with one card played as one persona. Deleting a conversation removes its state
files of every model and profile; deleting a persona removes the setup states made with it;
a card that left the characters' folders takes its setup states when the next session starts.

Names are derived here, in one place, so the files can be found without the model: a
conversation's state is `conversation-<database>-<id>`, a setup's `setup-c<card>-p<persona>-…`
(hashes: letters and digits only, so no name in a file name).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from pathlib import Path

from kotonia_tui.config import app_dirs
from kotonia_tui.engine.state_cache import FOLDER_NAME, remove_states, state_names

log = logging.getLogger(__name__)


def _digest(text: str, size: int = 12) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def database_tag(db_path: Path) -> str:
    """Saved states are named per database file (conversation ids are per file)."""
    return _digest(str(db_path.resolve()))


def conversation_state_name(db_path: Path, conv_id: int) -> str:
    return f"conversation-{database_tag(db_path)}-{conv_id}"


def card_tag(card_key: str) -> str:
    return f"c{_digest(card_key, 10)}"


def persona_tag(persona_name: str) -> str:
    return f"p{_digest(persona_name, 10)}"


def setup_owner(card_key: str, persona_name: str) -> str:
    """What a setup's saved state is made of (its name starts `setup-<owner>-`)."""
    return f"{card_tag(card_key)}-{persona_tag(persona_name)}"


_SETUP = re.compile(r"setup-(c[0-9a-f]{10})-(p[0-9a-f]{10})-")


class DerivedCopies:
    """The saved states in one cache folder (`<cache dir>/kv-state`)."""

    def __init__(self, folder: Path | None = None) -> None:
        # The engine's folder (bootstrap.state_cache_config): the cache dir's `kv-state`.
        self.folder = folder or app_dirs().cache / FOLDER_NAME

    def forget_conversations(self, db_path: Path, conv_ids: Iterable[int]) -> int:
        """Remove the saved states of these conversations; returns the files removed."""
        removed = sum(
            remove_states(self.folder, conversation_state_name(db_path, conv_id))
            for conv_id in conv_ids
        )
        if removed:
            log.info("removed %d saved state file(s) of deleted conversations", removed)
        return removed

    def forget_persona(self, persona_name: str) -> int:
        """Remove the setup states made with this persona (of every card)."""
        return remove_states(self.folder, f"setup-c*-{persona_tag(persona_name)}-*")

    def forget_cards_except(self, card_keys: Iterable[str]) -> int:
        """Remove the setup states of cards that are not among `card_keys` (the library's)."""
        kept = {card_tag(key) for key in card_keys}
        removed = 0
        for name in state_names(self.folder):
            found = _SETUP.match(name)
            if found is not None and found.group(1) not in kept:
                removed += remove_states(self.folder, name)
        return removed
