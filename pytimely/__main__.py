"""``python -m pytimely ...`` is the ``pytimely`` command (see :mod:`pytimely.cli`)."""

import sys

from .cli import main

sys.exit(main())
