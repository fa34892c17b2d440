"""Small UI state the app remembers between runs (the theme), in `app_dirs().state_file`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from kotonia_tui.config import app_dirs

log = logging.getLogger(__name__)


def state_path() -> Path:
    return app_dirs().state_file


def load_state(path: Path | None = None) -> dict[str, Any]:
    path = path or state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable UI state %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def save_state(updates: dict[str, Any], path: Path | None = None) -> None:
    """Merge `updates` into the state file (written atomically)."""
    path = path or state_path()
    data = load_state(path)
    data.update(updates)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log.warning("cannot save UI state to %s: %s", path, exc)
