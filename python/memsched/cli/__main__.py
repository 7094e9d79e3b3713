"""``python -m memsched.cli``: the ``memsched`` command."""
import sys

from . import main

sys.exit(main())
