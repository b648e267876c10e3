"""The optional compiled extension, ``pytimely._speedups``, and the switch that turns it off.

The extension (``pytimely/_speedups.c``) holds the exchange's fast paths (splitting a batch by
memoized routes, the records codec of :mod:`pytimely.communication.codec`), the clock of
observed operators (:mod:`pytimely.dataflow.invocation`), the drains of progress counts and
differential dataflow's inner loops (a key's updates across a trace's batches, a merge's keys,
a batch's index, a threshold's counts).  It is built at
install time when a C compiler is there and is optional: without it, or with
``PYTIMELY_PURE_PYTHON=1`` in the environment (read at import), pytimely runs the pure-Python
equivalents, which give the same results and read what the compiled path writes.

``speedups`` is the loaded module or None; callers look it up at the time of the call (not at
their import), so that a test can switch paths by patching this attribute.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "speedups", "implementation"]

#: Set to anything but ``""`` or ``"0"`` to run the pure-Python paths even if the extension
#: was built.
PURE_PYTHON_ENV = "PYTIMELY_PURE_PYTHON"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None, f"pure Python ({PURE_PYTHON_ENV} is set)"
    try:
        from . import _speedups
    except ImportError as exc:
        return None, f"pure Python (the compiled extension is not available: {exc})"
    return _speedups, "compiled (pytimely._speedups)"


speedups, _why = _load()


def implementation() -> str:
    """Which exchange paths this process runs: ``"compiled (...)"`` or ``"pure Python (why)"``."""
    if speedups is None:
        return _why if _why.startswith("pure") else "pure Python"
    return "compiled (pytimely._speedups)"
