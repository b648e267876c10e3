"""Optional dependencies (internal): which extra of the ``pytimely`` distribution brings what.

The core engine (progress tracking, dataflows, many workers, capture and replay) needs only numpy
and pyarrow.  Everything else is an *extra* of the distribution, installed on request:

* ``pytimely[spark]`` -- pyspark and pandas, for :mod:`pytimely.spark` and the demo;
* ``pytimely[plot]`` -- matplotlib, for the latency plots;
* ``pytimely[dev]`` -- the test and lint tools; ``pytimely[all]`` -- all of the above.

Invariant: importing :mod:`pytimely` never imports an optional dependency.  A feature that needs
one calls :func:`require` at its entry point, so a missing package surfaces as a
:class:`MissingExtraError` that names the command installing it, instead of a bare
``ModuleNotFoundError`` from deep inside the feature.
"""

from __future__ import annotations

import importlib.util

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """A feature needs a package that is not installed; the message names the extra to install.

    An :class:`ImportError`, so ``except ImportError`` code written for the bare
    ``ModuleNotFoundError`` keeps working."""

    def __init__(self, feature: str, missing: list[str], extra: str) -> None:
        self.feature = feature
        self.missing = missing
        self.extra = extra
        super().__init__(
            f"{feature} needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: "
            f"pip install 'pytimely[{extra}]'",
            name=missing[0],
        )


def require(feature: str, *modules: str, extra: str) -> None:
    """Raise :class:`MissingExtraError` unless every top-level module in ``modules`` can be
    imported; ``feature`` names what needs them and ``extra`` the distribution extra that
    installs them.  Only looks the modules up (``importlib.util.find_spec``): nothing is imported,
    so a check costs microseconds whether or not the feature is then used.
    """
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(feature, missing, extra)
