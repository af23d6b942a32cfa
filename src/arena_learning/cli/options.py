"""What several command modules share (so that none imports another): option overrides such as ``--ray``."""

from __future__ import annotations


def ray_overrides(address: str | None) -> list[str]:
    """Return the config overrides that ``--ray ADDRESS`` stands for."""
    if address is None:
        return []
    return ["scale.backend=ray", f"scale.address={'null' if address == 'local' else address}"]
