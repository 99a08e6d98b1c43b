"""Where the store lives: `<data dir>/models`. The data dir is `--data-dir`,
else `$INFERD_DATA_DIR`, else `$XDG_DATA_HOME/inferd` (~/.local/share/inferd),
the folder the Responses store uses too."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from inferd.store.responses import default_data_dir


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    return Path(explicit or os.environ.get("INFERD_DATA_DIR") or default_data_dir()).expanduser()


def free_bytes(folder: Path) -> int:
    """Free space on the filesystem that holds `folder` (or would, once made)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free
