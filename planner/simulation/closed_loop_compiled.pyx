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
    cdef Py_ssize_t i, j, k, n_sent = 0, next_admit = 0, n_running = 0, n_emit = 0, n_fin = 0, n_finishing = 0
    cdef Py_ssize_t n_done = 0, n_tpot = 0, si = 0, ended = 0, sends
    cdef long long s, reserved = 0
    cdef double t = 0.0, end_ms = 0.0
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
            stepped = _step(t, prompts, outputs, generated, prefilled, finishing, running, emitting, finished,
                            &n_running, &n_emit, &n_fin, &n_finishing, &next_admit, n_sent, &reserved,
                            base, per_seq, per_kv, per_token, per_pair, cap, budget, kv_capacity, &end_ms)
            if ended:
                sends = ended if ended < total - n_sent else total - n_sent
                for k in range(sends):
                    sent_ms[n_sent] = t
                    n_sent += 1
                ended = 0
                if not stepped:  # an idle engine wakes for them at once
                    stepped = _step(t, prompts, outputs, generated, prefilled, finishing, running, emitting,
                                    finished, &n_running, &n_emit, &n_fin, &n_finishing, &next_admit, n_sent,
                                    &reserved, base, per_seq, per_kv, per_token, per_pair, cap, budget,
                                    kv_capacity, &end_ms)
            if not stepped:
                if si >= clients:
                    break
                t = starts[si]
                continue
            t = end_ms
            for j in range(n_emit):
                s = emitting[j]
                if first_ms[s] < 0.0:
                    first_ms[s] = t
            for j in range(n_fin):
                s = finished[j]
                if s >= warmup:
                    ttft[n_done] = first_ms[s] - sent_ms[s]
                    e2e[n_done] = t - sent_ms[s]
                    done[n_done] = outputs[s]
                    n_done += 1
                    if outputs[s] > 1:
                        tpot[n_tpot] = (t - first_ms[s]) / (outputs[s] - 1)
                        n_tpot += 1
            ended = n_fin
        return (
            np.array(<double[:n_done]>ttft) if n_done else np.zeros(0),
            np.array(<double[:n_tpot]>tpot) if n_tpot else np.zeros(0),
            np.array(<double[:n_done]>e2e) if n_done else np.zeros(0),
            np.array(<long long[:n_done]>done) if n_done else np.zeros(0, dtype=np.int64),
        )
    finally:
        free(sent_ms); free(first_ms); free(generated); free(prefilled); free(finishing); free(running)
        free(emitting); free(finished); free(ttft); free(tpot); free(e2e); free(done)


cdef bint _step(
    double now,
    const long long[::1] prompts,
    const long long[::1] outputs,
    long long* generated,
    long long* prefilled,
    char* finishing,
    long long* running,
    long long* emitting,
    long long* finished,
    Py_ssize_t* n_running,
    Py_ssize_t* n_emit,
    Py_ssize_t* n_fin,
    Py_ssize_t* n_finishing,
    Py_ssize_t* next_admit,
    Py_ssize_t n_sent,
    long long* reserved,
    double base,
    double per_seq,
    double per_kv,
    double per_token,
    double per_pair,
    long long cap,
    long long budget,
    long long kv_capacity,
    double* end_ms,
) noexcept:
    """One ``Engine.next_step``: retire the last step's finished, admit, build the step; False: nothing runs."""
    cdef Py_ssize_t i, kept = 0, n, admitted = 0
    cdef long long s, head, kv = 0, left, chunk, prefill_tokens = 0, pairs = 0
    cdef bint capped = budget >= 0
    # retire the sequences whose last token was in the step that ended (they kept their slot during it)
    if n_finishing[0]:
        for i in range(n_running[0]):
            s = running[i]
            if finishing[s]:
                finishing[s] = 0
                reserved[0] -= prompts[s] + outputs[s]
            else:
                running[kept] = s
                kept += 1
        n_running[0] = kept
        n_finishing[0] = 0
    # admit first come, first served, while a slot and (with a KV capacity) the KV space hold
    n = cap - n_running[0]
    if n_sent - next_admit[0] < n:
        n = n_sent - next_admit[0]
    while admitted < n and next_admit[0] < n_sent:
        head = next_admit[0]
        if kv_capacity >= 0 and n_running[0] > 0 and reserved[0] + prompts[head] + outputs[head] > kv_capacity:
            break
        next_admit[0] += 1
        reserved[0] += prompts[head] + outputs[head]
        running[n_running[0]] = head
        n_running[0] += 1
        admitted += 1
    if n_running[0] == 0:
        n_emit[0] = 0
        n_fin[0] = 0
        return False
    # decode tokens first, one per sequence whose prompt is in; then prompt chunks in admission order
    n_emit[0] = 0
    for i in range(n_running[0]):
        s = running[i]
        if prefilled[s] >= prompts[s] and generated[s] < outputs[s]:
            emitting[n_emit[0]] = s
            n_emit[0] += 1
            kv += prompts[s] + generated[s]
    left = budget - n_emit[0]
    for i in range(n_running[0]):
        s = running[i]
        if prefilled[s] < prompts[s] and (not capped or left > 0):
            chunk = prompts[s] - prefilled[s]
            if capped and left < chunk:
                chunk = left
            pairs += chunk * prefilled[s] + chunk * (chunk + 1) // 2
            prefilled[s] += chunk
            left -= chunk
            prefill_tokens += chunk
            kv += prefilled[s]
            if prefilled[s] == prompts[s]:
                emitting[n_emit[0]] = s  # its first token is sampled at the end of its last chunk
                n_emit[0] += 1
    n_fin[0] = 0
    for i in range(n_emit[0]):
        s = emitting[i]
        generated[s] += 1
        if generated[s] == outputs[s]:
            finished[n_fin[0]] = s
            n_fin[0] += 1
            finishing[s] = 1
    n_finishing[0] = n_fin[0]
    end_ms[0] = now + (
        base
        + per_seq * <double>n_emit[0]
        + per_kv * <double>kv / 1000.0
        + per_token * <double>prefill_tokens
        + per_pair * <double>pairs / 1e6
    )
    return True
