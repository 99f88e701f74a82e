"""``python -m spotlight.cli``: the ``spotlight`` command."""

import sys

from spotlight.cli import main

sys.exit(main())
