"""``arena view``: serve a workspace's report on 127.0.0.1 for a quick look."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import user_errors


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def view(
        workspace: Annotated[Path, typer.Argument(help="workspace directory of a run")],
        port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: any free port)")] = 8765,
    ) -> None:
        """Serve the workspace's HTML report on 127.0.0.1 until Ctrl-C (the workspace is only read)."""
        from ..errors import ArenaError
        from ..httpd import serve_until_stopped
        from ..report.serve import ReportServer

        try:
            server = ReportServer(workspace, port)
        except OSError as err:
            raise ArenaError(
                f"cannot listen on 127.0.0.1:{port} ({err.strerror or err}): choose another --port") from None
        typer.echo(f"serving the report of {workspace} at {server.url} (Ctrl-C stops)", err=True)
        serve_until_stopped(server)
