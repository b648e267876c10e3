"""Timestamps, their partial order, and path summaries.

Timely dataflow stamps every record with a logical *timestamp*.  Timestamps are only
*partially* ordered: two loop iterations of different epochs may be incomparable.  Progress
tracking needs three things from a timestamp type, and this module is where they live:

* the partial order ``less_equal(a, b)`` (and ``less_than``), which frontiers are made of;
* a **total** order that *extends* the partial order (Python's ``<`` on the values), used only
  to sort and to process work in a safe sequence, never to decide "may this time still arrive";
* a *path summary* type: how a timestamp must advance along a path of the dataflow graph
  (``results_in(t) -> t | None``) and how two summaries compose (``followed_by``).

Built in are Python ``int`` (totally ordered epochs, summary = a non-negative ``int`` added to
the time) and :class:`Product` (the product partial order of an outer and an inner timestamp,
used by iterative scopes, arbitrarily nested) with :class:`ProductSummary`.

A user type joins by implementing the same protocol (see :class:`Timestamp` and
:class:`PathSummary`): ``less_equal``, a hashable total order ``<`` extending it, a class-level
``minimum()`` and a ``Summary`` class whose no-argument construction is the identity summary.

A *time domain* is "the type of the timestamps in a scope": ``int``, a user class, or a
:class:`ProductDomain`.  Domains answer ``minimum()`` and ``identity()`` (the identity summary),
which is all the system ever needs to know about a type as a whole.

Design note: we dispatch on ``type(x) is int`` in the helpers below instead of wrapping ints in
objects.  Wrapping would cost an allocation per record and per pointstamp; the check costs a few
nanoseconds and keeps the common case (integer epochs) at native speed.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Timestamp",
    "PathSummary",
    "Product",
    "ProductSummary",
    "ProductDomain",
    "IntDomain",
    "domain_of",
    "less_equal",
    "less_than",
    "results_in",
    "followed_by",
    "summary_less_equal",
    "minimum",
    "identity",
    "to_inner",
    "to_outer",
    "summarize",
]


@runtime_checkable
class Timestamp(Protocol):
    """The protocol a user-defined timestamp type implements.

    Invariants: ``less_equal`` is a partial order; ``a < b`` (Python's operator) is a total
    order consistent with it (``a.less_than(b)`` implies ``a < b``); values are hashable and
    immutable; ``type(a).minimum()`` is ``less_equal`` to every value.
    """

    def less_equal(self, other: Any) -> bool:
        """Whether ``self`` precedes or equals ``other`` in the partial order."""

    def less_than(self, other: Any) -> bool:
        """Whether ``self`` strictly precedes ``other`` (then also ``self < other``)."""


@runtime_checkable
class PathSummary(Protocol):
    """How a timestamp must change along a path.

    ``results_in(t)`` returns a time ``>= t`` or ``None`` (the time cannot travel the path);
    ``followed_by(s)`` composes (``self`` first, then ``s``) or returns ``None``.  Summaries are
    partially ordered by ``less_equal``; both methods must be monotone.
    """

    def results_in(self, t: Any) -> Any:
        """The time ``t`` becomes along the path (``>= t``), or ``None`` if it cannot travel it."""

    def followed_by(self, other: Any) -> Any:
        """This summary then ``other``, composed; ``None`` if no time can travel both paths."""

    def less_equal(self, other: Any) -> bool:
        """Whether ``self`` advances every time no further than ``other`` does."""


# --------------------------------------------------------------------------------------------
# Generic helpers: fast for ints, protocol calls otherwise.


def less_equal(a: Any, b: Any) -> bool:
    """Partial order on timestamps."""
    if type(a) is int:
        return a <= b
    return a.less_equal(b)


def less_than(a: Any, b: Any) -> bool:
    """Strict partial order on timestamps: ``a <= b`` and ``a != b``."""
    if type(a) is int:
        return a < b
    return a.less_equal(b) and a != b


def results_in(summary: Any, t: Any) -> Any:
    """Apply a path summary to a timestamp (``None`` if the time cannot travel the path)."""
    if type(summary) is int:
        return t + summary
    return summary.results_in(t)


def followed_by(a: Any, b: Any) -> Any:
    """Compose two path summaries: ``a`` first, then ``b``."""
    if type(a) is int:
        return a + b
    return a.followed_by(b)


def summary_less_equal(a: Any, b: Any) -> bool:
    """Partial order on path summaries."""
    if type(a) is int:
        return a <= b
    return a.less_equal(b)


# --------------------------------------------------------------------------------------------
# Product timestamps.


class Product(tuple):
    """A pair ``(outer, inner)`` under the product partial order.

    ``Product(a, b) <= Product(c, d)`` in the partial order iff ``a <= c`` and ``b <= d``
    (``less_equal``).  Python's ``<`` is the lexicographic tuple order, a total order extending
    the product order, used only for sorting.  Products nest: ``Product(Product(e, i), j)`` is
    the time of a loop inside a loop.  Being a tuple makes hashing and equality native speed.
    """

    __slots__ = ()

    def __new__(cls, outer: Any, inner: Any) -> Product:
        """The product time ``(outer, inner)``: ``outer`` from the enclosing scope."""
        return tuple.__new__(cls, (outer, inner))

    @property
    def outer(self) -> Any:
        """The time of the enclosing scope (an epoch, or a :class:`Product` when nested)."""
        return self[0]

    @property
    def inner(self) -> Any:
        """The iteration counter of this scope's loop (or a :class:`Product` when nested)."""
        return self[1]

    def less_equal(self, other: Product) -> bool:
        """The product partial order: both coordinates ``less_equal`` those of ``other``."""
        return less_equal(self[0], other[0]) and less_equal(self[1], other[1])

    def less_than(self, other: Product) -> bool:
        """The strict product order: ``less_equal`` and not equal."""
        return self.less_equal(other) and self != other

    def __repr__(self) -> str:
        return f"({self[0]!r}, {self[1]!r})"

    def __reduce__(self) -> tuple:
        return (Product, (self[0], self[1]))


class ProductSummary(tuple):
    """Path summary for :class:`Product` times: one summary per coordinate.

    ``results_in`` applies both (``None`` if either is ``None``); ``followed_by`` composes
    coordinate-wise; the order is the product order of the coordinate summaries.
    """

    __slots__ = ()

    def __new__(cls, outer: Any, inner: Any) -> ProductSummary:
        """The summary that applies ``outer`` to the outer time and ``inner`` to the inner one."""
        return tuple.__new__(cls, (outer, inner))

    @property
    def outer(self) -> Any:
        """The summary applied to the outer coordinate of a :class:`Product` time."""
        return self[0]

    @property
    def inner(self) -> Any:
        """The summary applied to the inner (iteration) coordinate of a :class:`Product` time."""
        return self[1]

    def results_in(self, t: Product) -> Product | None:
        """Each coordinate's summary applied to ``t``; ``None`` if either cannot apply."""
        o = results_in(self[0], t[0])
        if o is None:
            return None
        i = results_in(self[1], t[1])
        if i is None:
            return None
        return Product(o, i)

    def followed_by(self, other: ProductSummary) -> ProductSummary | None:
        """Compose coordinate-wise (``self`` first); ``None`` if either cannot compose."""
        o = followed_by(self[0], other[0])
        if o is None:
            return None
        i = followed_by(self[1], other[1])
        if i is None:
            return None
        return ProductSummary(o, i)

    def less_equal(self, other: ProductSummary) -> bool:
        """The product partial order on summaries: both coordinates ``summary_less_equal``."""
        return summary_less_equal(self[0], other[0]) and summary_less_equal(self[1], other[1])

    def __repr__(self) -> str:
        return f"ProductSummary({self[0]!r}, {self[1]!r})"

    def __reduce__(self) -> tuple:
        return (ProductSummary, (self[0], self[1]))


# --------------------------------------------------------------------------------------------
# Time domains: "the type of the timestamps of a scope".


class IntDomain:
    """Non-negative integer epochs; summaries are non-negative ints added to the time."""

    __slots__ = ()

    def minimum(self) -> int:
        """Epoch 0, the least integer time."""
        return 0

    def identity(self) -> int:
        """The summary 0: adds nothing to a time."""
        return 0

    def contains(self, t: Any) -> bool:
        """Whether ``t`` is a time of this domain (an ``int``; ``bool`` and floats are not)."""
        return type(t) is int

    def summary(self, value: Any) -> int:
        """Coerce a user-given summary (``feedback(1)``) into this domain's summary type."""
        if type(value) is not int or value < 0:
            raise ValueError(f"an int summary must be a non-negative int, got {value!r}")
        return value

    def __repr__(self) -> str:
        return "int"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntDomain) or other is int

    def __hash__(self) -> int:
        return hash("IntDomain")


INT = IntDomain()


class UserDomain:
    """A user timestamp class: ``cls.minimum()`` and ``cls.Summary()`` (the identity)."""

    __slots__ = ("cls",)

    def __init__(self, cls: type) -> None:
        if not hasattr(cls, "minimum") or not hasattr(cls, "Summary"):
            raise TypeError(
                f"timestamp type {cls.__name__} must define a classmethod minimum() and a "
                "Summary class whose no-argument construction is the identity summary"
            )
        self.cls = cls

    def minimum(self) -> Any:
        return self.cls.minimum()

    def identity(self) -> Any:
        return self.cls.Summary()

    def contains(self, t: Any) -> bool:
        """Whether ``t`` is a time of this domain (an instance of the timestamp class)."""
        return isinstance(t, self.cls)

    def summary(self, value: Any) -> Any:
        return value

    def __repr__(self) -> str:
        return self.cls.__name__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UserDomain) and other.cls is self.cls

    def __hash__(self) -> int:
        return hash(self.cls)


class ProductDomain:
    """``Product(outer, inner)`` times; the domain of an iterative scope."""

    __slots__ = ("outer", "inner")

    def __init__(self, outer: Any, inner: Any) -> None:
        self.outer = domain_of(outer)
        self.inner = domain_of(inner)

    def minimum(self) -> Product:
        """The product of the outer and inner domains' least times."""
        return Product(self.outer.minimum(), self.inner.minimum())

    def identity(self) -> ProductSummary:
        """The product of the outer and inner domains' identity summaries."""
        return ProductSummary(self.outer.identity(), self.inner.identity())

    def contains(self, t: Any) -> bool:
        """Whether ``t`` is a ``Product`` whose coordinates are times of the two domains."""
        return type(t) is Product and self.outer.contains(t[0]) and self.inner.contains(t[1])

    def summary(self, value: Any) -> ProductSummary:
        """``feedback(1)`` in an iterative scope advances the inner coordinate only."""
        if isinstance(value, ProductSummary):
            return value
        return ProductSummary(self.outer.identity(), self.inner.summary(value))

    def __repr__(self) -> str:
        return f"Product[{self.outer!r}, {self.inner!r}]"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ProductDomain)
            and other.outer == self.outer
            and other.inner == self.inner
        )

    def __hash__(self) -> int:
        return hash((self.outer, self.inner))


def domain_of(spec: Any) -> Any:
    """Turn ``int``, a user class, or a domain object into a domain object."""
    if spec is int or isinstance(spec, IntDomain):
        return INT
    if isinstance(spec, (ProductDomain, UserDomain)):
        return spec
    if isinstance(spec, type):
        return UserDomain(spec)
    raise TypeError(f"not a timestamp type: {spec!r}")


def minimum(domain: Any) -> Any:
    """The least time of ``domain`` (``int``, a user timestamp class or a domain object)."""
    return domain_of(domain).minimum()


def identity(domain: Any) -> Any:
    """The identity path summary of ``domain``: the summary that leaves every time unchanged."""
    return domain_of(domain).identity()


# --------------------------------------------------------------------------------------------
# Refinement: moving times across a scope boundary (enter / leave).
#
# A scope's domain *refines* its parent's: either it is the same domain (a region) or a
# ProductDomain whose outer coordinate is the parent's domain (an iterative scope).


def to_inner(outer_domain: Any, inner_domain: Any, t: Any) -> Any:
    """A parent time as seen inside the child scope."""
    if inner_domain == outer_domain:
        return t
    return Product(t, inner_domain.inner.minimum())


def to_outer(outer_domain: Any, inner_domain: Any, t: Any) -> Any:
    """A child time as seen by the parent (drop the loop counter)."""
    if inner_domain == outer_domain:
        return t
    return t[0]


def summarize(outer_domain: Any, inner_domain: Any, s: Any) -> Any:
    """A child path summary as a parent summary; never promises more than the child's."""
    if inner_domain == outer_domain:
        return s
    return s[0]
