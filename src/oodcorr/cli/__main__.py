"""``python -m oodcorr.cli``: the same as the ``oodcorr`` console script."""

import sys

from . import main

sys.exit(main())
