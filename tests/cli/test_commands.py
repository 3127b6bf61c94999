"""The sub-commands are registered in one place (:data:`bensemble.cli.COMMANDS`)."""

from __future__ import annotations

import argparse

import pytest

from bensemble import cli


def _listed_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {action.dest: action.help for action in sub._choices_actions}


@pytest.mark.parametrize("argv", [[], ["demo"], ["evaluate", "x.npy"], ["reproduce"]])
def test_every_command_lists_the_same_one_line_help_whichever_runs(argv):
    # a command that is not imported gets a stand-in; its help must not differ from the real one
    want = {name: entry[-1] for name, entry in cli.COMMANDS.items()}
    assert _listed_help(cli._build_parser(argv)) == want


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_each_command_shows_its_module_description(name, capsys):
    module, description, _, _ = cli.COMMANDS[name]
    import importlib

    text = getattr(importlib.import_module(module), description)
    assert cli.main([name, "--help"]) == 0
    shown = "".join(capsys.readouterr().out.split())  # argparse re-wraps (also at hyphens)
    assert "".join(text.split()) in shown
