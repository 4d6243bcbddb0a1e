# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The sizing simulation's event loop compiled (Cython): ``planner.simulation.replica_sim.serve_reference`` in C.

The Python loop is the reference: this one makes the same floating-point
operations in the same order (built with ``-ffp-contract=off``, so no fused
multiply-add changes a rounding), and ``tests/planner/test_replica_sim_compiled.py``
requires identical timelines, bit for bit. Built at install where a C
compiler is present (``setup.py``); without it the reference runs. The heap
holds the same keys as the reference's ``heapq`` (the step count at which a
sequence ends, shifted, or'ed with its request index: unique), so the two
pop the same sequences in the same order.
"""

from libc.math cimport ceil, sqrt
from libc.stdlib cimport free, malloc

import numpy as np

cdef int REQUEST_BITS = 32  # as the reference's: a heap entry's low bits hold the request's index
cdef long long REQUEST_MASK = (1LL << 32) - 1


cdef inline void _push(long long* heap, Py_ssize_t* size, long long key) noexcept nogil:
    cdef Py_ssize_t i = size[0]
    cdef Py_ssize_t parent
    size[0] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= key:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = key


cdef inline long long _pop(long long* heap, Py_ssize_t* size) noexcept nogil:
    cdef long long top = heap[0]
    cdef Py_ssize_t n = size[0] - 1
    cdef long long last = heap[n]
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t child
    size[0] = n
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= last:
            break
        heap[i] = heap[child]
        i = child
    if n > 0:
        heap[i] = last
    return top


cdef inline long long _steps_to_cover(double wait, double d, double grow) noexcept nogil:
    cdef double b = d + grow
    cdef long long m = <long long>ceil((-b + sqrt(b * b + 4 * grow * wait)) / (2 * grow))
    if m < 1:
        m = 1
    while m > 1 and (m - 1) * d + grow * (m - 1) * m >= wait:
        m -= 1
    while m * d + grow * m * (m + 1) < wait:
        m += 1
    return m


def serve(
    const double[::1] arr,
    const long long[::1] outs,
    const double[::1] prompts,
    double base,
    double slope,
    long long cap,
    double g,
    double per_token,
    double per_pair,
    double budget,
    double kv_capacity,
):
    """(first token ms, last token ms) per request: the reference's loop, in C."""
    cdef Py_ssize_t n = arr.shape[0]
    first_arr = np.empty(n)
    last_arr = np.empty(n)
    cdef double[::1] first = first_arr
    cdef double[::1] last = last_arr
    cdef long long* heap = <long long*>malloc((cap if cap < n else n) * sizeof(long long) + sizeof(long long))
    cdef long long* started_at = <long long*>malloc(n * sizeof(long long) + sizeof(long long))
    if heap == NULL or started_at == NULL:
        free(heap)
        free(started_at)
        raise MemoryError()
    cdef Py_ssize_t size = 0
    cdef double t = 0.0, d, grow, end0, wait, kv_base = 0.0, reserved = 0.0
    cdef double left, kv, tokens, pairs, chunk, done_tokens = 0.0
    cdef long long steps = 0, running = 0, decoding = 0, j, m, cover, done
    cdef Py_ssize_t nxt = 0, head = 0, first_of, i
    try:
        with nogil:
            while nxt < n or running:
                if not running and arr[nxt] > t:
                    t = arr[nxt]
                while (
                    running < cap
                    and nxt < n
                    and arr[nxt] <= t
                    and (not running or reserved + prompts[nxt] + outs[nxt] <= kv_capacity)
                ):
                    reserved += prompts[nxt] + outs[nxt]
                    nxt += 1
                    running += 1
                if head < nxt:
                    left = budget - decoding
                    kv = kv_base + decoding * steps
                    tokens = 0.0
                    pairs = 0.0
                    first_of = head
                    while head < nxt and left > 0:
                        chunk = prompts[head] - done_tokens
                        if left < chunk:
                            chunk = left
                        pairs += chunk * done_tokens + chunk * (chunk + 1) / 2
                        done_tokens += chunk
                        left -= chunk
                        tokens += chunk
                        kv += done_tokens
                        if done_tokens < prompts[head]:
                            break
                        _push(heap, &size, (steps + outs[head]) << REQUEST_BITS | head)
                        started_at[head] = steps
                        kv_base += prompts[head] - steps
                        decoding += 1
                        head += 1
                        done_tokens = 0.0
                    t += base + slope * decoding + g * kv + per_token * tokens + per_pair * pairs
                    for i in range(first_of, head):
                        first[i] = t
                    steps += 1
                else:
                    d = base + slope * running
                    grow = 0.0
                    if g:
                        d += g * (kv_base + running * steps)
                        grow = g * running / 2
                    end0 = t + d
                    j = (heap[0] >> REQUEST_BITS) - steps
                    if running < cap and nxt < n and reserved + prompts[nxt] + outs[nxt] <= kv_capacity:
                        wait = arr[nxt] - end0
                        if wait <= 0:
                            j = 1
                        else:
                            cover = 1 + (_steps_to_cover(wait, d, grow) if grow else <long long>ceil(wait / d))
                            if cover < j:
                                j = cover
                    m = j - 1
                    t = end0 + m * d + (grow * m * (m + 1) if grow else 0.0)
                    steps += j
                while decoding and heap[0] >> REQUEST_BITS <= steps:
                    done = _pop(heap, &size) & REQUEST_MASK
                    running -= 1
                    decoding -= 1
                    last[done] = t
                    reserved -= prompts[done] + outs[done]
                    kv_base -= prompts[done] - started_at[done]
    finally:
        free(heap)
        free(started_at)
    return first_arr, last_arr
