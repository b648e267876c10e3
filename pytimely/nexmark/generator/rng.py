"""The generator's PRNG: PCG-64 (MCG, XSL-RR) as Rust's ``rand_pcg`` ``Mcg128Xsl64``.

:class:`Pcg64Mcg` draws one value at a time (the scalar reference path); :func:`raw_draws`
computes a whole range of the raw output stream at once with numpy (128-bit products split in
32-bit limbs), for the columnar fast path.  Prices (:func:`price_from_u24`,
:func:`prices_from_u24`) turn 24-bit draws into Megaphone's binary32-rounded prices.
"""

from __future__ import annotations

import math
import struct
import threading
from decimal import Decimal, localcontext

import numpy as np

# PCG-64 MCG multiplier (rand_pcg 0.1.1, Mcg128Xsl64).
PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645
MASK64 = (1 << 64) - 1
MASK128 = (1 << 128) - 1

__all__ = [
    "MASK128",
    "MASK64",
    "Pcg64Mcg",
    "PCG_MULTIPLIER",
    "pcg_selftest",
    "PCG_TEST_VECTOR",
    "price_from_u24",
    "prices_from_u24",
    "raw_draws",
]


# ---------------------------------------------------------------------------------------------
# PRNG (scalar)


class Pcg64Mcg:
    """PCG-64 MCG with XSL-RR output (rand 0.6.5 ``SmallRng`` on 64-bit targets).

    ``state`` is the 128-bit state; the constructor forces it odd (``| 1``) as seeding does.
    """

    __slots__ = ("state",)

    def __init__(self, state: int) -> None:
        self.state = (state & MASK128) | 1

    @classmethod
    def from_seed(cls, seed: bytes) -> Pcg64Mcg:
        """The generator seeded from 16 bytes read little-endian, as rand's ``from_seed``."""
        if len(seed) != 16:
            raise ValueError("PCG-64 seeds are 16 bytes")
        return cls(int.from_bytes(seed, "little"))

    def next_u64(self) -> int:
        """Advance the state once and return 64 bits (the XSL-RR output)."""
        s = (self.state * PCG_MULTIPLIER) & MASK128
        self.state = s
        x = ((s >> 64) ^ s) & MASK64
        rot = s >> 122
        return ((x >> rot) | (x << (64 - rot))) & MASK64

    def next_u32(self) -> int:
        """The low 32 bits of :meth:`next_u64`, as rand's ``next_u32`` for this generator."""
        return self.next_u64() & 0xFFFFFFFF

    def gen_range(self, m: int) -> int:
        """``gen_range(0, m)`` with rand 0.6.5's conservative rejection zone (m >= 1)."""
        zone = ((m << (64 - m.bit_length())) - 1) & MASK64
        while True:
            p = self.next_u64() * m
            if (p & MASK64) <= zone:
                return p >> 64

    def gen_u24(self) -> int:
        """The 24 bits behind ``gen::<f32>()``: the value is ``u * 2**-24``."""
        return (self.next_u64() & 0xFFFFFFFF) >> 8

    def gen_price(self) -> int:
        """A bid or auction price drawn as Megaphone does (see :func:`price_from_u24`)."""
        return price_from_u24(self.gen_u24())


PCG_TEST_VECTOR = (0x63B4A3A813CE700A, 0x382954200617AB24, 0xA7FD85AE3FE950CE)


def pcg_selftest() -> None:
    """Check the PCG against rand_pcg's test vector (state 42, forced odd to 43)."""
    rng = Pcg64Mcg(42)
    got = tuple(rng.next_u64() for _ in PCG_TEST_VECTOR)
    if got != PCG_TEST_VECTOR:
        raise AssertionError(f"PCG-64 test vector mismatch: {[hex(g) for g in got]}")


# ---------------------------------------------------------------------------------------------
# Price: round(10^(6x) * 100) in binary32, 10^y correctly rounded.

_F32 = struct.Struct("<f")


def _f32(x: float) -> float:
    """Round a double to binary32 (round to nearest even) and back."""
    return _F32.unpack(_F32.pack(x))[0]


def _pow10_f32_exact(y: float) -> float:
    """Correctly rounded binary32 value of 10**y, by high-precision decimal arithmetic."""
    with localcontext() as ctx:
        ctx.prec = 80
        val = Decimal(10) ** Decimal(y)
        e = math.frexp(float(val))[1]  # val in [2^(e-1), 2^e) (up to a boundary case below)
        ulp = Decimal(2) ** (e - 24)
        t = val / ulp
        fl = int(t)  # val > 0: floor
        frac = t - fl
        if frac > Decimal("0.5") or (frac == Decimal("0.5") and fl % 2 == 1):
            fl += 1
        return float(Decimal(fl) * ulp)


# Tolerance (in units of the binary32 ulp) around a rounding midpoint within which the double
# ``pow`` result is not trusted and the exact decimal path decides.
_MIDPOINT_TOL = 2.0**-22


def _pow10_f32(y: float) -> float:
    d = 10.0**y
    _, e = math.frexp(d)
    t = math.ldexp(d, 24 - e)  # d / ulp32(d)
    if abs(t - math.floor(t) - 0.5) < _MIDPOINT_TOL:
        return _pow10_f32_exact(y)
    return _f32(d)


def price_from_u24(u: int) -> int:
    """Megaphone's price for the 24-bit uniform ``u`` (``x = u * 2**-24``):
    ``floor(f32(f32(10**f32(6x)) * 100) + 0.5)``.  Range [100, 99_999_888]."""
    y = _f32(6.0 * (u * 2.0**-24))
    p = _pow10_f32(y)
    q = _f32(p * 100.0)
    return math.floor(q + 0.5)


def _near_midpoint(d: np.ndarray) -> np.ndarray:
    """Where the double ``d`` is too close to a binary32 rounding midpoint to trust."""
    _, e = np.frexp(d)
    t = np.ldexp(d, 24 - e)  # d / ulp32(d)
    t -= np.floor(t)
    t -= 0.5
    return np.abs(t, out=t) < _MIDPOINT_TOL


_PRICE_CHUNK = 1 << 18


def prices_from_u24(u: np.ndarray) -> np.ndarray:
    """Vectorised :func:`price_from_u24` (any integer array of values < 2**24 -> int64)."""
    u = np.asarray(u)
    out = np.empty(u.shape, dtype=np.int64)
    flat_u, flat_out = u.reshape(-1), out.reshape(-1)
    for c in range(0, flat_u.size, _PRICE_CHUNK):
        uc = flat_u[c : c + _PRICE_CHUNK]
        y = (uc * (6.0 * 2.0**-24)).astype(np.float32).astype(np.float64)
        d = np.power(10.0, y)
        suspicious = _near_midpoint(d)
        p = d.astype(np.float32).astype(np.float64)
        if suspicious.any():
            idx = np.flatnonzero(suspicious)
            p[idx] = [_pow10_f32_exact(float(v)) for v in y[idx]]
        p *= 100.0
        q = p.astype(np.float32).astype(np.float64)
        q += 0.5
        flat_out[c : c + _PRICE_CHUNK] = np.floor(q, out=q)
    return out


# ---------------------------------------------------------------------------------------------
# PRNG (vectorised): the raw output stream for a range of positions
_U64 = np.uint64
_M32 = _U64(0xFFFFFFFF)


def _mulhi_vv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High 64 bits of the 128-bit products of two uint64 arrays (or array and uint64)."""
    a1 = a >> _U64(32)
    a0 = a & _M32
    b1 = b >> _U64(32)
    b0 = b & _M32
    p00 = a0 * b0
    p01 = a0 * b1
    p10 = a1 * b0
    p11 = a1 * b1
    mid = (p00 >> _U64(32)) + (p01 & _M32) + (p10 & _M32)
    return p11 + (p01 >> _U64(32)) + (p10 >> _U64(32)) + (mid >> _U64(32))


def _mul128_vs(ah: np.ndarray, al: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ah:al) * b mod 2**128`` for uint64 limb arrays and a Python int ``b``."""
    bh = _U64((b >> 64) & MASK64)
    bl = _U64(b & MASK64)
    lo = al * bl
    hi = _mulhi_vv(al, bl) + al * bh + ah * bl
    return hi, lo


class _PowTable:
    """``M**i mod 2**128`` for ``i < len``, as uint64 limb arrays (grown by doubling)."""

    def __init__(self) -> None:
        self.hi = np.zeros(1, dtype=np.uint64)
        self.lo = np.ones(1, dtype=np.uint64)
        self.lock = threading.Lock()

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            while len(self.lo) < n:
                k = len(self.lo)
                mk = pow(PCG_MULTIPLIER, k, 1 << 128)
                h, l = _mul128_vs(self.hi, self.lo, mk)
                self.hi = np.concatenate([self.hi, h])
                self.lo = np.concatenate([self.lo, l])
            return self.hi[:n], self.lo[:n]


_POW = _PowTable()


_RAW_CHUNK = 1 << 15


def raw_draws(seed_state: int, base: int, length: int, pad: int = 0) -> np.ndarray:
    """``next_u64`` outputs number ``base .. base + length - 1`` (0-based) of a PCG-64 MCG
    started at ``seed_state`` (already odd), as a uint64 array.

    Output ``base + i`` comes from the state ``s0 * M**i`` with ``s0 = seed * M**(base+1)``;
    the products use a cached table of ``M**i`` and are computed in cache-sized chunks with
    in-place numpy operations (the high half of the 128-bit product in 32-bit limbs)."""
    s0 = (seed_state * pow(PCG_MULTIPLIER, base + 1, 1 << 128)) & MASK128
    th, tl = _POW.get(length)
    sh, sl = _U64(s0 >> 64), _U64(s0 & MASK64)
    b0, b1 = _U64(s0 & 0xFFFFFFFF), _U64((s0 >> 32) & 0xFFFFFFFF)
    out = np.empty(length + pad, dtype=np.uint64)
    out[length:] = 0
    mul, add, rsh, band = np.multiply, np.add, np.right_shift, np.bitwise_and
    S32 = _U64(32)
    n = min(_RAW_CHUNK, length)
    bufs = [np.empty(n, dtype=np.uint64) for _ in range(8)]
    for c in range(0, length, _RAW_CHUNK):
        e = min(c + _RAW_CHUNK, length)
        a0, a1, p00, p01, p10, p11, t, lo = (b[: e - c] for b in bufs)
        tlc = tl[c:e]
        band(tlc, _M32, out=a0)
        rsh(tlc, S32, out=a1)
        mul(a0, b0, out=p00)
        mul(a0, b1, out=p01)
        mul(a1, b0, out=p10)
        mul(a1, b1, out=p11)
        rsh(p00, S32, out=p00)  # mid = (p00 >> 32) + (p01 & M32) + (p10 & M32)
        band(p01, _M32, out=t)
        add(p00, t, out=p00)
        band(p10, _M32, out=t)
        add(p00, t, out=p00)
        rsh(p00, S32, out=p00)
        rsh(p01, S32, out=p01)
        add(p11, p01, out=p11)
        rsh(p10, S32, out=p10)
        add(p11, p10, out=p11)
        add(p11, p00, out=p11)  # p11 = high half of tl * sl
        mul(tlc, sh, out=t)
        add(p11, t, out=p11)
        mul(th[c:e], sl, out=t)
        add(p11, t, out=p11)  # p11 = high 64 bits of the state
        mul(tlc, sl, out=lo)  # low 64 bits of the state
        np.bitwise_xor(p11, lo, out=lo)  # x = hi ^ lo
        rsh(p11, _U64(58), out=p11)  # rot = state >> 122
        o = out[c:e]
        rsh(lo, p11, out=o)
        np.subtract(_U64(64), p11, out=p11)
        band(p11, _U64(63), out=p11)
        np.left_shift(lo, p11, out=lo)
        np.bitwise_or(o, lo, out=o)  # rotate_right(x, rot)
    return out
