"""``python -m kvcore ARGS``: the ``kvcore`` command (:func:`kvcore.cli.main`), for a
checkout run without installing the console script."""

import sys

from kvcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
