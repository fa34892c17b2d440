"""`kotonia doctor` on semantic recall: the embedding model, sqlite-vec, the vectors."""

from __future__ import annotations

from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.store import Store


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name + " "))


def test_doctor_with_semantic_recall_off_says_recall_is_by_words(capsys):
    code, out, _ = run(capsys, "doctor")  # tests/conftest.py sets semantic_recall = false
    assert code == 0
    assert "none (semantic_recall = false)" in _row(out, "embedding model")
    assert "sqlite-vec" not in out
    # Recall by words keeps to its share (docs/decisions.md D-40).
    assert _row(out, "recall").endswith("20% of the window (1,638 tokens) a turn, by words")


def test_doctor_reports_the_model_sqlite_vec_and_the_vectors(
    capsys, monkeypatch, tiny_embedding_path
):
    with Store.open(app_dirs().default_db) as store:
        store.import_conversation(
            Conversation(character_key="rowan-ashby", character_name="Rowan", persona_name="Ann"),
            [Message(role=Role.USER, speaker="Ann", text=f"line {i}") for i in range(3)],
        )
    monkeypatch.setenv("KOTONIA_SEMANTIC_RECALL", "true")
    monkeypatch.setenv("KOTONIA_EMBEDDING_MODEL_PATH", str(tiny_embedding_path))
    code, out, err = run(capsys, "doctor", "--load")
    assert code == 0, err
    assert f"{tiny_embedding_path} (" in out and "dimension 64)" in _row(out, "embedding model")
    assert _row(out, "sqlite-vec").split() == ["sqlite-vec", "available"]
    assert _row(out, "vectors").endswith("0 stored, 3 pending for this model")
    assert "  yes, dimension 64, in " in _row(out, "embedding loaded")
    # By meaning too, recall also takes the room after a fold unless told not to (D-41).
    recall = _row(out, "recall")
    assert "by words and meaning, and the room a short window leaves after a fold" in recall
    assert recall.endswith("(recall_free_room unset: on with recall by meaning)")
    monkeypatch.setenv("KOTONIA_RECALL_FREE_ROOM", "false")
    code, out, err = run(capsys, "doctor")
    assert code == 0, err
    assert _row(out, "recall").endswith("a turn, by words and meaning")
    # A cap below the share is what a turn recalls, and the room adds nothing to it.
    monkeypatch.delenv("KOTONIA_RECALL_FREE_ROOM")
    monkeypatch.setenv("KOTONIA_RECALL_MAX_TOKENS", "100")
    code, out, err = run(capsys, "doctor")
    assert code == 0, err
    recall = _row(out, "recall")
    assert "100 tokens (recall_max_tokens; 20% of the window would be " in recall
    assert recall.endswith("(recall_max_tokens leaves no more for the room after a fold)")


def test_doctor_names_a_missing_embedding_model(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KOTONIA_SEMANTIC_RECALL", "true")
    monkeypatch.setenv("KOTONIA_EMBEDDING_MODEL_PATH", str(tmp_path / "gone.gguf"))
    code, out, err = run(capsys, "doctor")
    assert code == 1
    assert "gone.gguf (problem: recall by words only)" in out
    assert "gone.gguf: embedding model file not found; set embedding_model_path" in err


def test_doctor_on_the_shipped_model_before_and_after_its_first_use(capsys, monkeypatch):
    """By default (no embedding_model_path) recall uses the shipped all-MiniLM-L6-v2: the
    doctor says it is converted on first use, `--load` converts and loads it, and from then on
    the doctor names the file, its dimension and the vectors stored for it."""
    monkeypatch.setenv("KOTONIA_SEMANTIC_RECALL", "true")
    models = app_dirs().cache / "models"
    code, out, err = run(capsys, "doctor")
    assert code == 0, err
    assert _row(out, "embedding model").endswith(
        f"all-MiniLM-L6-v2 (shipped): converted on first use into {models}"
    )
    assert _row(out, "sqlite-vec").split() == ["sqlite-vec", "available"]
    assert "\nvectors " not in out  # no file yet, so no vectors for it
    code, out, err = run(capsys, "doctor", "--load")
    assert code == 0, err
    assert "  yes, dimension 384, in " in _row(out, "embedding loaded")
    code, out, err = run(capsys, "doctor")
    assert code == 0, err
    assert _row(out, "embedding model").endswith(
        f"{models / 'all-MiniLM-L6-v2.f16.gguf'} (46 MB, dimension 384)"
    )
    assert _row(out, "vectors").endswith("0 stored, 0 pending for this model")
    assert "by words and meaning" in _row(out, "recall")


def test_doctor_without_the_shipped_package_says_how_to_get_it(capsys, monkeypatch):
    from kotonia_tui.engine import default_embedding

    monkeypatch.setenv("KOTONIA_SEMANTIC_RECALL", "true")
    monkeypatch.setattr(default_embedding, "PACKAGE", "no_such_package_here")
    code, out, err = run(capsys, "doctor")
    assert code == 1
    assert _row(out, "embedding model").endswith(
        "all-MiniLM-L6-v2, shipped (problem: recall by words)"
    )
    assert _row(out, "recall").endswith("a turn, by words")
    assert "problem: the shipped embedding model (all-MiniLM-L6-v2) is not installed: run " in err


def test_doctor_says_a_set_model_is_not_used_when_semantic_recall_is_off(capsys, monkeypatch):
    monkeypatch.setenv("KOTONIA_EMBEDDING_MODEL_PATH", "/models/bge-m3.gguf")
    code, out, _ = run(capsys, "doctor")
    assert code == 0
    assert _row(out, "embedding model").endswith(
        "none (semantic_recall = false; embedding_model_path /models/bge-m3.gguf is not used): "
        "recall by words"
    )
