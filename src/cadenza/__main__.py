"""``python -m cadenza``: the same as the ``cadenza`` command."""

import sys

from .cli import main

sys.exit(main())
