# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A closed loop stepped through the engine, compiled (Cython): ``planner.simulation.closed_loop.serve_reference``
in C, for the engines a plan fits (continuous batching, no noise, no speculative decoding, no adapters).

The Python loop, which steps ``loadgen.engine.Engine`` itself, is the reference: this one keeps the same
state (the running sequences in admission order, the waiting ones first come, first served), makes the
same floating-point operations in the same order (built with ``-ffp-contract=off``), and
``tests/planner/test_closed_loop_compiled.py`` requires identical measurements, bit for bit. Built at
install where a C compiler is present (``setup.py``); without it the reference runs.
"""

from libc.stdlib cimport free, malloc

import numpy as np


cdef struct _Engine:
    # the requests' lengths and each one's progress, by its index in send order
    const long long* prompts
    const long long* outputs
    long long* generated
    long long* prefilled
    char* finishing  # its last token was in the step that just ran: it leaves at the next step's start
    # the running sequences in admission order, this step's token emitters and finishers
    long long* running
    long long* emitting
    long long* finished
    Py_ssize_t n_running, n_emit, n_fin, n_finishing
    Py_ssize_t next_admit  # the first request sent and not yet admitted (they wait in send order)
    long long reserved  # KV tokens the running sequences hold (prompt and output each)
    double base, per_seq, per_kv, per_token, per_pair
    long long cap, budget, kv_capacity  # -1: no budget, no KV capacity


def serve(
    const double[::1] starts,
    const long long[::1] prompts,
    const long long[::1] outputs,
    long long warmup,
    double base,
    double per_seq,
    double per_kv,
    double per_token,
    double per_pair,
    long long cap,
    long long budget,
    long long kv_capacity,
):
    """Each measured request's (TTFT, TPOT, E2E) in ms and its output tokens, in the order they finished.

    ``starts``: when each client sends its first request (ms, ascending); every later request is sent by
    the client whose answer ended, once the next step began. ``prompts``/``outputs``: each request's
    lengths in send order (the first ``warmup`` are not measured). ``budget``/``kv_capacity``: -1 for
    none.
    """
    cdef Py_ssize_t clients = starts.shape[0]
    cdef Py_ssize_t total = prompts.shape[0]
    cdef double* sent_ms = <double*>malloc(total * sizeof(double))
    cdef double* first_ms = <double*>malloc(total * sizeof(double))
    cdef long long* generated = <long long*>malloc(total * sizeof(long long))
    cdef long long* prefilled = <long long*>malloc(total * sizeof(long long))
    cdef char* finishing = <char*>malloc(total * sizeof(char))
    cdef long long* running = <long long*>malloc((cap + 1) * sizeof(long long))
    cdef long long* emitting = <long long*>malloc((cap + 1) * sizeof(long long))
    cdef long long* finished = <long long*>malloc((cap + 1) * sizeof(long long))
    cdef double* ttft = <double*>malloc(total * sizeof(double))
    cdef double* tpot = <double*>malloc(total * sizeof(double))
    cdef double* e2e = <double*>malloc(total * sizeof(double))
    cdef long long* done = <long long*>malloc(total * sizeof(long long))
    if not (sent_ms and first_ms and generated and prefilled and finishing and running and emitting
            and finished and ttft and tpot and e2e and done):
        free(sent_ms); free(first_ms); free(generated); free(prefilled); free(finishing); free(running)
        free(emitting); free(finished); free(ttft); free(tpot); free(e2e); free(done)
        raise MemoryError()
    cdef Py_ssize_t i, j, k, n_sent = 0, n_done = 0, n_tpot = 0, si = 0, ended = 0, sends
    cdef long long s
    cdef double t = 0.0, end_ms = 0.0
    cdef _Engine e
    e.prompts, e.outputs, e.generated, e.prefilled, e.finishing = &prompts[0], &outputs[0], generated, prefilled, finishing
    e.running, e.emitting, e.finished = running, emitting, finished
    e.n_running = e.n_emit = e.n_fin = e.n_finishing = e.next_admit = 0
    e.reserved = 0
    e.base, e.per_seq, e.per_kv, e.per_token, e.per_pair = base, per_seq, per_kv, per_token, per_pair
    e.cap, e.budget, e.kv_capacity = cap, budget, kv_capacity
    cdef bint stepped
    try:
        for i in range(total):
            generated[i] = 0
            prefilled[i] = 0
            finishing[i] = 0
            first_ms[i] = -1.0
        while True:
            while si < clients and starts[si] <= t:
                if n_sent < total:  # a client that starts once every request was sent sends none
                    sent_ms[n_sent] = starts[si]
                    n_sent += 1
                si += 1
            # --- Engine.next_step(t) ---
            stepped = _step(&e, t, n_sent, &end_ms)
            if ended:
                sends = ended if ended < total - n_sent else total - n_sent
                for k in range(sends):
                    sent_ms[n_sent] = t
                    n_sent += 1
                ended = 0
                if not stepped:  # an idle engine wakes for them at once
                    stepped = _step(&e, t, n_sent, &end_ms)
            if not stepped:
                if si >= clients:
                    break
                t = starts[si]
                continue
            t = end_ms
            for j in range(e.n_emit):
                s = emitting[j]
                if first_ms[s] < 0.0:
                    first_ms[s] = t
            for j in range(e.n_fin):
                s = finished[j]
                if s >= warmup:
                    ttft[n_done] = first_ms[s] - sent_ms[s]
                    e2e[n_done] = t - sent_ms[s]
                    done[n_done] = outputs[s]
                    n_done += 1
                    if outputs[s] > 1:
                        tpot[n_tpot] = (t - first_ms[s]) / (outputs[s] - 1)
                        n_tpot += 1
            ended = e.n_fin
        return (
            np.array(<double[:n_done]>ttft) if n_done else np.zeros(0),
            np.array(<double[:n_tpot]>tpot) if n_tpot else np.zeros(0),
            np.array(<double[:n_done]>e2e) if n_done else np.zeros(0),
            np.array(<long long[:n_done]>done) if n_done else np.zeros(0, dtype=np.int64),
        )
    finally:
        free(sent_ms); free(first_ms); free(generated); free(prefilled); free(finishing); free(running)
        free(emitting); free(finished); free(ttft); free(tpot); free(e2e); free(done)


cdef bint _step(_Engine* e, double now, Py_ssize_t n_sent, double* end_ms) noexcept:
    """One ``Engine.next_step``: retire the last step's finished, admit, build the step; False: nothing runs."""
    cdef Py_ssize_t i, kept = 0, n, admitted = 0
    cdef long long s, head, kv = 0, left, chunk, prefill_tokens = 0, pairs = 0
    cdef bint capped = e.budget >= 0
    # retire the sequences whose last token was in the step that ended (they kept their slot during it)
    if e.n_finishing:
        for i in range(e.n_running):
            s = e.running[i]
            if e.finishing[s]:
                e.finishing[s] = 0
                e.reserved -= e.prompts[s] + e.outputs[s]
            else:
                e.running[kept] = s
                kept += 1
        e.n_running = kept
        e.n_finishing = 0
    # admit first come, first served, while a slot and (with a KV capacity) the KV space hold
    n = e.cap - e.n_running
    if n_sent - e.next_admit < n:
        n = n_sent - e.next_admit
    while admitted < n and e.next_admit < n_sent:
        head = e.next_admit
        if e.kv_capacity >= 0 and e.n_running > 0 and e.reserved + e.prompts[head] + e.outputs[head] > e.kv_capacity:
            break
        e.next_admit += 1
        e.reserved += e.prompts[head] + e.outputs[head]
        e.running[e.n_running] = head
        e.n_running += 1
        admitted += 1
    e.n_emit = 0
    e.n_fin = 0
    if e.n_running == 0:
        return False
    # decode tokens first, one per sequence whose prompt is in; then prompt chunks in admission order
    for i in range(e.n_running):
        s = e.running[i]
        if e.prefilled[s] >= e.prompts[s] and e.generated[s] < e.outputs[s]:
            e.emitting[e.n_emit] = s
            e.n_emit += 1
            kv += e.prompts[s] + e.generated[s]
    left = e.budget - e.n_emit
    for i in range(e.n_running):
        s = e.running[i]
        if e.prefilled[s] < e.prompts[s] and (not capped or left > 0):
            chunk = e.prompts[s] - e.prefilled[s]
            if capped and left < chunk:
                chunk = left
            pairs += chunk * e.prefilled[s] + chunk * (chunk + 1) // 2
            e.prefilled[s] += chunk
            left -= chunk
            prefill_tokens += chunk
            kv += e.prefilled[s]
            if e.prefilled[s] == e.prompts[s]:
                e.emitting[e.n_emit] = s  # its first token is sampled at the end of its last chunk
                e.n_emit += 1
    for i in range(e.n_emit):
        s = e.emitting[i]
        e.generated[s] += 1
        if e.generated[s] == e.outputs[s]:
            e.finished[e.n_fin] = s
            e.n_fin += 1
            e.finishing[s] = 1
    e.n_finishing = e.n_fin
    end_ms[0] = now + (
        e.base
        + e.per_seq * <double>e.n_emit
        + e.per_kv * <double>kv / 1000.0
        + e.per_token * <double>prefill_tokens
        + e.per_pair * <double>pairs / 1e6
    )
    return True
