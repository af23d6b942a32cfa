"""Files another process may read while they are written: written whole beside the target, then renamed.

A reader (a resumed run, the report, a person) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: str | Path, data: Any, *, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (values JSON lacks, e.g. paths, as their text); return the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=indent, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path
