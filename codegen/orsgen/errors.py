"""Errors the CLI reports as one line on stderr with exit code 2."""


class OrsgenError(Exception):
    """A failure the user can act on: bad input, unreachable server, unwritable output."""
