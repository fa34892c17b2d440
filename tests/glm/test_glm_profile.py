"""The glm-4.6v-flash profile as a user meets it: `kotonia doctor` without the files, the files'
places and config lines it names, then chat and eval with the stand-ins under the real names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs, load_settings
from tests.cards import write_short_card
from tests.chat.test_folding import CHAPTER
from tests.eval.conftest import short_conversation
from tests.tiny_models import write_tiny_png

MODEL = "GLM-4.6V-Flash-Q4_K_M.gguf"
MMPROJ = "mmproj-GLM-4.6V-Flash-F16.gguf"


@pytest.fixture
def glm_profile(monkeypatch, tmp_path) -> Path:
    """The shipped glm-4.6v-flash profile selected, with a home folder of its own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KOTONIA_PROFILE", "glm-4.6v-flash")
    return home


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def stand_ins(folder: Path, scripted_glm, mmproj_for, text: str) -> tuple[Path, Path]:
    """The tiny GLM pair, copied to the real files' names in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model = scripted_glm(text)
    (folder / MODEL).write_bytes(model.read_bytes())
    (folder / MMPROJ).write_bytes(mmproj_for(model).read_bytes())
    return folder / MODEL, folder / MMPROJ


def test_doctor_without_the_files_says_what_to_download_and_where_to_put_it(
    capsys, glm_profile, scripted_glm, mmproj_for
):
    code, out, err = run(capsys, "doctor")
    assert code == 1
    models = glm_profile / "models"
    assert f"{models / MODEL}: model file not found" in err
    assert f"{models / MMPROJ}: mmproj file not found" in err
    assert f"download {MODEL} and {MMPROJ}" in err
    assert "https://huggingface.co/" in err
    assert f"put them in {models}" in err
    config = app_dirs().config_file
    assert f"write where they are in {config}:" in err
    snippet = err[err.index('  profile = "glm-4.6v-flash"') :].splitlines()
    toml = "\n".join(line[2:] for line in snippet if line.startswith("  "))
    assert '[profiles."glm-4.6v-flash"]' in toml
    assert f'model_path = "{models / MODEL}"' in toml

    # The config lines it printed, pointed at another folder, are all a user has to write: the
    # profile keeps its window, template and thinking setting.
    elsewhere = glm_profile / "Downloads"
    stand_ins(elsewhere, scripted_glm, mmproj_for, "Welcome.")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(toml.replace(str(models), str(elsewhere)) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "doctor", "--load")
    assert code == 0, err
    assert re.search(r"model\s+" + re.escape(str(elsewhere / MODEL)), out)
    assert re.search(r"n_ctx\s+65536", out) and re.search(r"prompt format\s+template", out)
    assert re.search(r"chat template\s+yes", out)
    assert "download" not in err


def test_the_readme_config_lines_select_the_profile_and_keep_its_settings(glm_profile):
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(profile = \"glm-4.6v-flash\".*?)```", readme, re.S)
    assert block is not None
    config = app_dirs().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(block.group(1), encoding="utf-8")
    profile = load_settings().active_profile()
    assert profile.model_path == Path("/data/gguf/GLM-4.6V-Flash-Q4_K_M.gguf")
    assert profile.mmproj_path == Path("/data/gguf/mmproj-GLM-4.6V-Flash-F16.gguf")
    assert (profile.n_ctx, profile.prompt_format.value, profile.thinking) == (
        65536,
        "template",
        False,
    )


def test_the_files_in_the_named_folder_are_found(capsys, glm_profile, scripted_glm, mmproj_for):
    stand_ins(glm_profile / "models", scripted_glm, mmproj_for, "Welcome.")
    code, out, err = run(capsys, "doctor")
    assert code == 0, err
    assert err == ""
    assert f"{glm_profile / 'models' / MODEL} (0.00 GB)" in out


def test_an_unquoted_profile_name_with_a_dot_is_named_not_ignored(capsys, glm_profile):
    config = app_dirs().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[profiles.glm-4.6v-flash]\nmodel_path = "/m/x.gguf"\n', encoding="utf-8")
    code, _, err = run(capsys, "doctor")
    assert code == 1
    assert err.count("\n") == 1 and str(config) in err
    assert '[profiles."glm-4.6v-flash"]' in err
    config.write_text('[profiles."glm-4.6v-flash"]\nmodle_path = "/m/x.gguf"\n', encoding="utf-8")
    code, _, err = run(capsys, "doctor")
    assert code == 1 and "modle_path" in err


def test_chat_with_an_image_on_the_stand_ins(
    capsys, glm_profile, scripted_glm, mmproj_for, monkeypatch
):
    stand_ins(glm_profile / "models", scripted_glm, mmproj_for, "The lens is clean.")
    monkeypatch.setenv("KOTONIA_N_CTX", "4096")  # the stand-in's own window
    key = write_short_card()
    png = write_tiny_png(glm_profile / "lens.png", (32, 48))
    code, out, err = run(
        capsys, "chat", key, "--say", "Look.", "--image", str(png), "--say", "Well?", "--stats"
    )
    assert code == 0, err
    assert out == "The lens is clean.\nThe lens is clean.\n"
    first, second = (json.loads(line) for line in err.splitlines() if line.startswith("{"))
    assert first["images"] == second["images"] == 1
    assert second["reused"] >= first["prompt_positions"]


@pytest.mark.slow
def test_eval_on_a_few_messages(capsys, glm_profile, scripted_glm, mmproj_for, tmp_path):
    stand_ins(glm_profile / "models", scripted_glm, mmproj_for, CHAPTER)
    data = tmp_path / "conv.json"
    data.write_text(short_conversation(10).model_dump_json())
    out_json = tmp_path / "report.json"
    # A window and fold points small enough for 20 messages to fold a few times.
    folding = ("fold_trigger_ratio=0.2", "fold_ceiling_ratio=0.3", "min_verbatim_ratio=0.05")
    code, out, err = run(
        capsys,
        "eval",
        str(data),
        "--n-ctx",
        "2048",
        "--questions",
        "1",
        "--arms",
        "generational",
        "--full-max-ctx",
        "0",
        *(arg for value in folding for arg in ("--set", value)),
        "--set",
        "fold_headroom_ratio=0.05",
        "--json",
        str(out_json),
        "--quiet",
    )
    assert code == 0, err
    report = json.loads(out_json.read_text())
    assert report["model"]["name"] == "tiny-glm-4.6v-flash-scripted"
    assert report["model"]["prompt_format"] == "template"
    assert report["input"]["messages"] == 20
    run_ = report["runs"][0]
    assert run_["folds"]["chapters"] >= 2  # the chronicler wrote through GLM's template
    assert "recall by range" in out
