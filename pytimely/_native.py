"""The optional compiled extension, ``pytimely._speedups``, and the switch that turns it off.

The extension (``pytimely/_speedups.c``) holds the exchange's fast paths (splitting a batch by
memoized routes, the records codec of :mod:`pytimely.communication.codec`), the clock of
observed operators (:mod:`pytimely.dataflow.invocation`), the drains of progress counts and
differential dataflow's inner loops (a key's updates across a trace's batches, a merge's keys,
a batch's index, a threshold's counts and packed histories, a join's pairs).  It is built at
install time when a C compiler is there and is optional: without it, or with
``PYTIMELY_PURE_PYTHON=1`` in the environment (read at import), pytimely runs the pure-Python
equivalents, which give the same results and read what the compiled path writes.

``speedups`` is the loaded module or None; callers look it up at the time of the call (not at
their import), so that a test can switch paths by patching this attribute.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType

__all__ = ["API", "PURE_PYTHON_ENV", "speedups", "implementation"]

#: The functions the Python side calls in the extension, as a number: bumped with
#: ``API_VERSION`` in ``_speedups.c`` whenever a function is added or changes its signature,
#: or the records codec gains a form (a stale decoder would refuse a peer's payloads).
#: An extension built from an older source (an editable install not rebuilt after a pull) is
#: not loaded: the pure-Python paths run, with a warning that says so.
API = 5

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
    built = getattr(_speedups, "API", 0)
    if built != API:
        why = (
            f"pure Python (the compiled extension was built from another version of "
            f"pytimely/_speedups.c: API {built}, this source wants {API}; rebuild it with "
            f"`pip install -e .`)"
        )
        warnings.warn(why, RuntimeWarning, stacklevel=2)
        return None, why
    return _speedups, "compiled (pytimely._speedups)"


speedups, _why = _load()


def implementation() -> str:
    """Which exchange paths this process runs: ``"compiled (...)"`` or ``"pure Python (why)"``."""
    if speedups is None:
        return _why if _why.startswith("pure") else "pure Python"
    return "compiled (pytimely._speedups)"
