"""What a chapter written by a scripted chronicler looks like under the chapter's grammar.

A scripted model answers every prompt with its script (tests/tiny_models.py), and so does the
fake engine (tests/fake_engine.py), which puts the script into the schema's strings as the
grammar makes the model do. A chapter is
answered in a JSON schema the engine enforces, and the evidence ids it must name depend on the
range folded, which most tests do not fix in advance; so a prose script cannot be the whole
answer. Under the grammar the structure is forced and the script's words land in the chapter's
strings (cut at their maximum length). A chapter that script wrote is therefore structured, its
text is rendered from the structure ("- ... (#N)"), and it carries the script's opening words.
Tests that need an exact chapter script its JSON for a known range
(tests/chat/test_structured_folding.py).
"""

from __future__ import annotations

from kotonia_tui.domain import Chapter, LedgerEntry, LedgerKind


def written_by_script(chapter: Chapter, script: str, words: int = 5) -> bool:
    opening = " ".join(script.split()[:words])
    return (
        chapter.structure is not None and chapter.text.startswith("- ") and opening in chapter.text
    )


def ledger_entry(
    conv_id: int, kind: LedgerKind, text: str, *evidence: int, subject: str = ""
) -> LedgerEntry:
    """A ledger entry as a chapter would write it, for tests that store chapters directly."""
    return LedgerEntry(
        conversation_id=conv_id, kind=kind, text=text, subject=subject, evidence=list(evidence)
    )
