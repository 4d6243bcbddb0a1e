"""The one typed wrapper around HdrHistogram: integer microseconds, 3 significant digits.

This is the only module that imports ``hdrh`` (it is untyped). Every
recorded value is checked: HdrHistogram_py silently returns ``False`` for a
value out of range, so we count those instead of losing them. Histograms are
merged with ``add`` (exact: same configuration, bucket-wise sums) and stored
base64-encoded, so results from many processes combine without error.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import struct
import zlib
from dataclasses import dataclass
from typing import Final

import numpy as np
from hdrh.histogram import HdrHistogram


@dataclass(frozen=True, slots=True, kw_only=True)
class HistogramConfig:
    """Range and precision shared by every histogram in a results file."""

    unit: str = "us"
    lowest: int = 1
    highest: int = 3_600_000_000  # one hour in microseconds
    significant_figures: int = 3

    def to_json(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "lowest": self.lowest,
            "highest": self.highest,
            "significant_figures": self.significant_figures,
        }


DEFAULT_CONFIG: Final = HistogramConfig()


@dataclass(frozen=True, slots=True)
class _Layout:
    """Per-bucket value bounds, so queries are vectorised instead of HdrHistogram_py's
    per-bucket Python loops (its mean takes ~40 ms on our range)."""

    lowest: np.ndarray
    highest: np.ndarray
    median: np.ndarray


@functools.cache
def _layout(config: HistogramConfig) -> _Layout:
    h = HdrHistogram(config.lowest, config.highest, config.significant_figures)
    lowest = [h.get_value_from_index(i) for i in range(h.counts_len)]
    highest = [h.get_highest_equivalent_value(v) for v in lowest]
    median = [h._hdr_median_equiv_value(v) for v in lowest]
    return _Layout(
        np.array(lowest, dtype=np.float64), np.array(highest, dtype=np.int64), np.array(median, dtype=np.float64)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Frozen:
    """A decoded histogram's recorded buckets only: its dense counts array is ~24k int64s
    (190 KB), which a results file of thousands of levels cannot hold seven times a level."""

    index: np.ndarray  # bucket indices with a count, ascending
    counts: np.ndarray
    total: int
    min_value: int
    max_value: int
    text: str | None  # the encoding it came from (encode() returns it unchanged); None: encode when asked


class LatencyHistogram:
    """Latency samples in integer microseconds, with an out-of-range count.

    A histogram read from a results file stays compact (its recorded buckets
    only) until something records into it or merges into it.
    """

    __slots__ = ("_frozen", "_hdr", "config", "out_of_range")

    def __init__(self, config: HistogramConfig = DEFAULT_CONFIG) -> None:
        self.config = config
        self._hdr: HdrHistogram | None = None  # dense only once something records or merges into it
        self._frozen: _Frozen | None = _EMPTY
        self.out_of_range = 0  # samples that could not be recorded (negative or beyond `highest`)

    @property
    def _h(self) -> HdrHistogram:
        """The dense HdrHistogram, built from the compact form on first need."""
        if self._hdr is None:
            assert self._frozen is not None
            self._hdr = _thaw(self._frozen, self.config)
            self._frozen = None
        return self._hdr

    def _nonzero(self) -> tuple[np.ndarray, np.ndarray]:
        """(bucket index, count) of every recorded bucket, ascending."""
        if self._frozen is not None:
            return self._frozen.index, self._frozen.counts
        counts = self._counts()
        index = np.flatnonzero(counts)
        return index, counts[index]

    def record_us(self, value_us: int) -> bool:
        """Record one sample; a value outside the range is counted, not dropped silently."""
        if value_us < 0 or not self._h.record_value(max(value_us, self.config.lowest)):
            self.out_of_range += 1
            return False
        return True

    def record_many_us(self, values_us: np.ndarray) -> None:
        """Record many samples at once: the same buckets as ``record_us`` one by one, vectorised.

        A request's inter-token gaps are recorded together; one Python call per
        token (HdrHistogram_py's ``record_value``) cost ~3 us each.
        """
        v = np.asarray(values_us, dtype=np.int64)
        negative = v < 0
        v = np.maximum(v, self.config.lowest)
        h = self._h
        bit_length = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
        bucket = bit_length - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
        sub_bucket = v >> (bucket + h.unit_magnitude)
        index = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + (sub_bucket - h.sub_bucket_half_count)
        ok = ~negative & (index >= 0) & (index < h.counts_len)
        self.out_of_range += int(v.size - np.count_nonzero(ok))
        kept = v[ok]
        if kept.size:
            counts = self._counts()
            counts += np.bincount(index[ok], minlength=counts.size).astype(counts.dtype)  # np.add.at: 36x slower
            h.total_count += int(kept.size)
            h.min_value = min(h.min_value, int(kept.min()))
            h.max_value = max(h.max_value, int(kept.max()))

    def record_many_s(self, values_s: np.ndarray) -> None:
        self.record_many_us(np.rint(np.asarray(values_s, dtype=np.float64) * 1e6).astype(np.int64))

    def record_s(self, value_s: float) -> bool:
        """Record a duration given in seconds (rounded to the nearest microsecond)."""
        return self.record_us(round(value_s * 1e6))

    @property
    def count(self) -> int:
        return self._frozen.total if self._frozen is not None else int(self._h.get_total_count())

    def _counts(self) -> np.ndarray:
        """A writable view of HdrHistogram's counts array (no copy)."""
        counts: np.ndarray = np.ctypeslib.as_array(self._h.counts)[: self._h.counts_len]
        return counts

    def percentile_us(self, percentile: float) -> int | None:
        """The value at ``percentile`` (0-100), or None when the histogram is empty.

        Same rule as HdrHistogram: the highest value equivalent to the first
        bucket whose cumulative count reaches ``round(p% * total)``.
        """
        total = self.count
        if total == 0:
            return None
        target = max(int(min(percentile, 100.0) * total / 100 + 0.5), 1)
        buckets, counts = self._nonzero()
        index = int(buckets[np.searchsorted(np.cumsum(counts), target)])
        layout = _layout(self.config)
        return int(layout.highest[index] if percentile else layout.lowest[index])

    def mean_us(self) -> float | None:
        total = self.count
        if total == 0:
            return None
        buckets, counts = self._nonzero()
        return float(counts @ _layout(self.config).median[buckets]) / total

    def stddev_us(self) -> float | None:
        """The samples' standard deviation (bucket medians, as ``mean_us``); None when empty."""
        mean = self.mean_us()
        if mean is None:
            return None
        buckets, counts = self._nonzero()
        return math.sqrt(float(counts @ (_layout(self.config).median[buckets] - mean) ** 2) / self.count)

    def max_us(self) -> int | None:
        if not self.count:
            return None
        return self._frozen.max_value if self._frozen is not None else int(self._h.get_max_value())

    def min_us(self) -> int | None:
        if not self.count:
            return None
        return self._frozen.min_value if self._frozen is not None else int(self._h.get_min_value())

    def equivalent_range_us(self, value_us: int) -> tuple[int, int]:
        """The bucket ``[lowest, highest]`` that ``value_us`` is indistinguishable within."""
        shape = _shape(self.config)  # bucket arithmetic only: this histogram stays compact
        return int(shape.get_lowest_equivalent_value(value_us)), int(shape.get_highest_equivalent_value(value_us))

    def freeze(self) -> None:
        """Keep the recorded buckets only (a finished level's histograms are read, not recorded into)."""
        if self._hdr is None:
            return
        index, counts = self._nonzero()
        h = self._hdr
        self._frozen = _Frozen(index=index, counts=counts.copy(), total=int(h.get_total_count()), min_value=int(h.get_min_value()),
                               max_value=int(h.get_max_value()), text=None) if len(index) else _EMPTY  # fmt: skip
        self._hdr = None

    def merge(self, other: LatencyHistogram) -> None:
        """Add ``other``'s samples into this histogram (exact)."""
        if other.config != self.config:
            raise ValueError(f"cannot merge histograms with different configs: {self.config} vs {other.config}")
        if other.count:
            self._h.add(other._h if other._frozen is None else _thaw(other._frozen, other.config))
        self.out_of_range += other.out_of_range

    def copy(self) -> LatencyHistogram:
        new = LatencyHistogram(self.config)
        new.merge(self)
        return new

    def counts(self) -> list[tuple[int, int]]:
        """``(value_us, count)`` for every recorded bucket, ascending."""
        dense = self._h if self._frozen is None else _thaw(self._frozen, self.config)
        return [
            (int(item.value_iterated_to), int(item.count_at_value_iterated_to))
            for item in dense.get_recorded_iterator()
        ]

    def encode(self) -> str:
        """Compressed base64 form (HdrHistogram's own V2 encoding)."""
        if not self.count:
            return ""
        if self._frozen is not None:
            if self._frozen.text is None:
                return bytes(_thaw(self._frozen, self.config).encode()).decode("ascii")
            return self._frozen.text
        return bytes(self._h.encode()).decode("ascii")

    @classmethod
    def decode(cls, text: str, config: HistogramConfig = DEFAULT_CONFIG, out_of_range: int = 0) -> LatencyHistogram:
        """A histogram from its encoding, kept compact; a corrupt or oversized encoding is a ValueError.

        The encoding is checked before HdrHistogram decodes it: a 1.4 MB zlib
        bomb once inflated to 2 GB, and an encoded range wider than the file's
        once allocated gigabytes of buckets.
        """
        hist = cls(config)
        hist.out_of_range = out_of_range
        if not text:
            return hist
        _check_encoding(text, config)
        try:
            decoded = HdrHistogram.decode(text.encode("ascii"))
        except Exception as exc:
            raise ValueError(f"corrupt histogram encoding ({type(exc).__name__})") from None
        total = int(decoded.get_total_count())
        if total:
            counts = np.ctypeslib.as_array(decoded.counts)[: decoded.counts_len]
            index = np.flatnonzero(counts)
            if total != int(counts[index].sum()):
                raise ValueError("corrupt histogram encoding (its total does not match its buckets)")
            layout = _layout(config)  # the extremes as a dense histogram reports them: their buckets' bounds
            hist._frozen = _Frozen(index=index, counts=counts[index].astype(np.int64), total=total, min_value=int(layout.lowest[index[0]]),
                                   max_value=int(layout.highest[index[-1]]), text=text)  # fmt: skip
        return hist

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        # Same config means same bucket layout, so the raw counts arrays compare exactly.
        (a_index, a_counts), (b_index, b_counts) = self._nonzero(), other._nonzero()
        return (
            self.config == other.config
            and self.out_of_range == other.out_of_range
            and np.array_equal(a_index, b_index)
            and np.array_equal(a_counts, b_counts)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LatencyHistogram(count={self.count}, out_of_range={self.out_of_range})"


def _thaw(frozen: _Frozen, config: HistogramConfig) -> HdrHistogram:
    """A dense HdrHistogram with the compact form's buckets, total and extremes."""
    h = HdrHistogram(config.lowest, config.highest, config.significant_figures)
    if not frozen.total:
        return h  # empty: its min and max keep HdrHistogram's "nothing recorded" values
    np.ctypeslib.as_array(h.counts)[frozen.index] = frozen.counts
    h.total_count = frozen.total
    h.min_value, h.max_value = frozen.min_value, frozen.max_value
    return h


_EMPTY: Final = _Frozen(
    index=np.zeros(0, dtype=np.int64), counts=np.zeros(0, dtype=np.int64), total=0, min_value=0, max_value=0, text=""
)


@functools.cache
def _shape(config: HistogramConfig) -> HdrHistogram:
    """An empty histogram of ``config``, for bucket arithmetic (equivalent ranges); never recorded into."""
    return HdrHistogram(config.lowest, config.highest, config.significant_figures)


_COOKIE_COMPRESSED_V2 = 0x1C849304  # HdrHistogram's V2 compressed-encoding cookie (its 0xF0 bits: word size)
_COOKIE_V2 = 0x1C849303  # ... and its inflated payload's
_MAX_PAYLOAD = 2 << 20  # an encoded histogram of our range inflates to ~0.2 MB at most (LEB128 counts)


def _check_encoding(text: str, config: HistogramConfig) -> None:
    """Refuse an encoding that would inflate past ``_MAX_PAYLOAD`` or declare another range than ``config``
    (HdrHistogram would inflate it whole and allocate that range's buckets before we could look)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("corrupt histogram encoding (not base64)") from None
    if len(raw) < 8 or struct.unpack(">I", raw[:4])[0] & ~0xF0 != _COOKIE_COMPRESSED_V2:
        raise ValueError("corrupt histogram encoding (not HdrHistogram V2 compressed)")
    inflate = zlib.decompressobj()
    try:
        payload = inflate.decompress(raw[8:], _MAX_PAYLOAD)
    except zlib.error:
        raise ValueError("corrupt histogram encoding (bad zlib data)") from None
    if inflate.unconsumed_tail:
        raise ValueError(f"histogram encoding inflates past {_MAX_PAYLOAD >> 20} MiB; not one this tool writes")
    if len(payload) < 40 or struct.unpack(">I", payload[:4])[0] & ~0xF0 != _COOKIE_V2:
        raise ValueError("corrupt histogram encoding (bad payload header)")
    sig, lowest, highest = struct.unpack(">IQQ", payload[12:32])
    if (lowest, highest, sig) != (config.lowest, config.highest, config.significant_figures):
        raise ValueError(
            f"histogram encoded for range {lowest}..{highest} at {sig} significant figures; the file's "
            f"histogram_config says {config.lowest}..{config.highest} at {config.significant_figures}"
        )
