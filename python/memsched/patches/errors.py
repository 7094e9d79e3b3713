"""Why the patch rewrite refuses: a refused region or grid carries the reason (`Refused`).

Its own module at the bottom of `patches/` (it imports nothing): the modules that refuse and
the runtime adapters that catch a refusal share it without importing each other.
"""


class Refused(ValueError):
    """A region or grid the patch rewrite cannot handle; the message says why."""
