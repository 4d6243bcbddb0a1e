"""The HdrHistogram wrapper: round trips, exact merges, out-of-range counting, percentiles."""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.histogram import DEFAULT_CONFIG, HistogramConfig, LatencyHistogram

values = st.lists(st.integers(1, 10**9), max_size=200)


def hist(vs: list[int]) -> LatencyHistogram:
    h = LatencyHistogram()
    for v in vs:
        h.record_us(v)
    return h


@given(values)
def test_encode_decode_round_trip(vs: list[int]) -> None:
    h = hist(vs)
    assert LatencyHistogram.decode(h.encode()) == h


def test_an_encoding_wider_than_the_files_range_is_a_value_error_not_an_index_error() -> None:
    # found by the fuzz test: a results file whose histogram was recorded with a larger highest value
    wide = LatencyHistogram(HistogramConfig(highest=10**12))
    wide.record_us(10**11)
    with pytest.raises(ValueError, match=r"histogram encoded for range 1\.\.1000000000000 at 3 significant figures"):
        LatencyHistogram.decode(wide.encode(), HistogramConfig(highest=10**6))


def test_a_zlib_bomb_is_refused_before_it_inflates() -> None:
    # 1.4 MB of results file once inflated to 2 GB inside HdrHistogram's decoder
    header = struct.pack(">IIIIQQd", 0x1C849313, 0, 0, 3, 1, DEFAULT_CONFIG.highest, 1.0)
    bomb = zlib.compress(header + b"\0" * (64 << 20), 9)
    text = base64.b64encode(struct.pack(">II", 0x1C849314, len(bomb)) + bomb).decode()
    assert len(text) < 200_000
    with pytest.raises(ValueError, match="inflates past 2 MiB"):
        LatencyHistogram.decode(text)


def test_decoded_histograms_stay_compact_and_answer_the_same() -> None:
    h = LatencyHistogram()
    h.record_many_us(np.array([5, 50, 500, 5_000, 50_000, 5_000_000]))
    back = LatencyHistogram.decode(h.encode())
    assert back == h and back.percentile_us(50) == h.percentile_us(50) and back.mean_us() == h.mean_us()
    assert back.equivalent_range_us(5_000) == h.equivalent_range_us(5_000)
    assert back._hdr is None  # read, ranged and compared without a dense 190 KB counts array
    h.freeze()
    assert h._hdr is None and h.encode() == back.encode() and h == back
    assert LatencyHistogram()._hdr is None  # an empty histogram costs no buckets either


@given(values, values)
def test_merge_is_commutative_and_equals_recording_the_union(a: list[int], b: list[int]) -> None:
    ab, ba = hist(a), hist(b)
    ab.merge(hist(b))
    ba.merge(hist(a))
    assert ab == ba == hist(a + b)


def test_out_of_range_values_are_counted_not_lost() -> None:
    h = LatencyHistogram()
    assert not h.record_us(-1)
    assert not h.record_us(10**13)
    assert h.record_us(0)  # clamped to the lowest trackable value
    assert (h.count, h.out_of_range) == (1, 2)


def test_percentiles_match_numpy_within_bucket_resolution() -> None:
    rng = np.random.default_rng(0)
    samples = rng.lognormal(10, 1, size=5000).astype(int) + 1
    h = hist(samples.tolist())
    for p in (50, 90, 95, 99):
        # HdrHistogram's percentile is the smallest value with at least p% at or below it
        expected = int(np.percentile(samples, p, method="inverted_cdf"))
        lo, hi = h.equivalent_range_us(expected)
        got = h.percentile_us(p)
        assert got is not None and lo * 0.999 <= got <= hi * 1.001


def test_empty_histogram_says_none_not_zero() -> None:
    h = LatencyHistogram()
    assert h.percentile_us(50) is None and h.mean_us() is None and h.encode() == ""


@settings(max_examples=15)  # the reference (HdrHistogram_py's own mean) takes ~40 ms a call
@given(st.lists(st.integers(1, 10**9), min_size=1, max_size=300), st.floats(0, 100))
def test_vectorised_queries_match_hdrhistogram(vs: list[int], p: float) -> None:
    h = hist(vs)
    raw = h._h  # the wrapped HdrHistogram, queried the slow way
    assert h.percentile_us(p) == raw.get_value_at_percentile(p)
    assert h.mean_us() == pytest.approx(raw.get_mean_value())


@given(st.lists(st.integers(-5, 10**13), max_size=200))
def test_record_many_equals_recording_one_by_one(vs: list[int]) -> None:
    one = LatencyHistogram()
    for v in vs:
        one.record_us(v)
    many = LatencyHistogram()
    many.record_many_us(np.array(vs, dtype=np.int64))
    assert many == one
    assert (many.count, many.min_us(), many.max_us()) == (one.count, one.min_us(), one.max_us())


@settings(max_examples=25)
@given(st.lists(st.integers(1, 10**9), min_size=1, max_size=200))
def test_a_decoded_histogram_stays_compact_and_answers_like_the_dense_one(values: list[int]) -> None:
    dense = hist(values)
    decoded = LatencyHistogram.decode(dense.encode())
    assert decoded._hdr is None  # only the recorded buckets are held
    for p in (0, 1, 50, 95, 99.9, 100):
        assert decoded.percentile_us(p) == dense.percentile_us(p)
    assert (decoded.count, decoded.min_us(), decoded.max_us()) == (dense.count, dense.min_us(), dense.max_us())
    assert decoded.mean_us() == pytest.approx(dense.mean_us())
    assert decoded == dense and decoded.encode() == dense.encode() and decoded.counts() == dense.counts()
    decoded.record_us(5)  # recording into it thaws it, exactly
    dense.record_us(5)
    assert decoded == dense and decoded.max_us() == dense.max_us()
