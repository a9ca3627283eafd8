"""Errors a user can cause: the CLI prints their message and exits, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (config, files, run directory); exit code 1 by default."""

    exit_code = 1


class ConfigError(UserError):
    """An invalid configuration; exits with 2 like a usage error."""

    exit_code = 2
