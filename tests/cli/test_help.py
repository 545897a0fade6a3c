"""``--help`` on every ``sparkmq`` command: the first thing a new user types never crashes.

The commands are found by walking the click command tree Typer builds from
:data:`sparkmq.cli.app`, so a command added later is covered without touching this file.
"""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from sparkmq.cli import app


def command_paths() -> list[tuple[str, ...]]:
    """The path of every command and command group below the root, depth first."""
    found: list[tuple[str, ...]] = []

    def walk(command: object, path: tuple[str, ...]) -> None:
        if path:
            found.append(path)
        # A group has ``commands`` (Typer ships its own click: no isinstance on click.Group).
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


PATHS = command_paths()


def test_the_walk_finds_the_commands() -> None:
    assert ("serve",) in PATHS and ("topics", "create") in PATHS, PATHS


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help_of(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="sparkmq", terminal_width=200)
    assert result.exit_code == 0, f"sparkmq {' '.join(path)} --help:\n{result.output}\n{result.exception!r}"
    assert f"sparkmq {' '.join(path)}" in result.output, result.output


def test_serve_help_shows_the_cluster_address_form() -> None:
    """The ``--cluster`` help once held ``[/chroot]``, which rich read as a closing tag."""
    result = CliRunner().invoke(app, ["serve", "--help"], prog_name="sparkmq", terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "zk://HOST:PORT[,HOST:PORT][/chroot]" in result.output, result.output
