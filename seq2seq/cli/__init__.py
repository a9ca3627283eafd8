"""The command line: one Typer app, one thin function per command."""
