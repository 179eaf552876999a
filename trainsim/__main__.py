"""``python -m trainsim``: the command line."""

import sys

from trainsim.scenarios.cli import main

if __name__ == "__main__":
    sys.exit(main())
