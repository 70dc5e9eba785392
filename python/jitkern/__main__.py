"""python -m jitkern: the `jitkern` command (jitkern/cli.py)."""

import sys

from .cli import command

if __name__ == "__main__":
    sys.exit(command())
