#!/usr/bin/env python3
"""CPU emulation of src/backend/cuda/mla_prefill_sm90.cu's index math (no GPU needed).

Replays the kernel block by block with numpy, transliterating its address and fragment
formulas, on top of a model of the Hopper pieces it relies on:
  - TMA tile load with 128-byte swizzle: box element (row r, column c) of a {64, 1, 128} box
    lands at byte r * 128 + 2 c of the destination with 16-byte chunk bits [4:6] XORed by
    address bits [7:9]; rows past the tensor are zero.
  - wgmma shared-memory descriptors, 128-byte swizzle (the canonical layouts of CUTLASS's
    make_gmma_desc, cute/atom/mma_traits_sm90_gmma.hpp): K-major element (mn, k) at start +
    (mn % 8) * 128 + (mn / 8) * SBO + 2 k; MN-major element (k, mn) at start + 2 (mn % 64) +
    (mn / 64) * LBO + (k % 8) * 128 + (k / 8) * SBO; then the same address swizzle.
  - wgmma accumulator fragment (m64nNk16, f32): register i of lane l in warp w holds row 16 w +
    l / 4 + 8 ((i % 4) >= 2), column 8 (i / 4) + 2 (l % 4) + (i % 2); register-A fragment (bf16x2
    regs a0..a3): a0 (row g, k 2t..2t+1), a1 (row g+8, same k), a2 (row g, k 8+2t..), a3 (row
    g+8, k 8+2t..) with g = l / 4, t = l % 4.
  - mbarrier phases (parity waits) for the producer / consumer protocol and the named
    barriers of the ping-pong variant, simulated as cooperative actors: checks the parities,
    that every wait is eventually satisfied, that a stage is never overwritten while a consumer
    still reads it, and that no named-barrier phase is left open at exit.
Compares every output with a float64 reference on the same bf16-rounded inputs (P rounded to
bf16 as the kernel does is the only remaining difference: tolerance 2e-2 max abs).
This checks the kernel's composition of those pieces (panel offsets, k-step advance, V's
LBO/SBO, Q's swizzled stores, masks, online softmax, P packing, output rows, barrier
parities); it cannot check that the hardware model itself is right: that is the GPU run's job.

usage: python3 scripts/emulate_mla_prefill_sm90.py   (prints PASS / FAIL per case)
"""
import sys

import numpy as np

kDn, kDr, kDv, kDqk = 128, 64, 128, 192
kBQ, kBK, kStages = 128, 128, 2
kPanel = 128 * 128
kQBytes, kKBytes, kVBytes = 3 * kPanel, 3 * kPanel, 2 * kPanel
kOffQ, kOffK = 0, kQBytes
kOffV = kOffK + kStages * kKBytes


def bf16(x):
    """Round float32 -> bf16 (round to nearest even), returned as float32."""
    a = np.asarray(x, dtype=np.float32).copy()
    u = a.view(np.uint32)
    u += 0x7FFF + ((u >> 16) & 1)
    u &= 0xFFFF0000
    return a


def swz(addr):
    addr = np.asarray(addr, dtype=np.int64)
    return addr ^ (((addr >> 7) & 7) << 4)


class Smem:
    def __init__(self, nbytes):
        self.v = np.zeros(nbytes // 2, dtype=np.float32)  # one bf16 value per 2 bytes
        self.written = np.zeros(nbytes // 2, dtype=np.int64)  # version tag (tile id) per element

    def store(self, byte_addr, vals, tag=0):
        idx = np.asarray(byte_addr) // 2
        self.v[idx] = vals
        self.written[idx] = tag

    def load(self, byte_addr):
        return self.v[np.asarray(byte_addr) // 2]


def tma_load(sm, dst, tensor, c0, h, row, tag):
    """tensor: [total_k, H, cols] float32 (bf16 values); box {64, 1, 128}."""
    r = np.arange(128)[:, None]
    c = np.arange(64)[None, :]
    rows = row + r
    vals = np.where(rows < tensor.shape[0], tensor[np.minimum(rows, tensor.shape[0] - 1), h, c0 + c], 0.0)
    sm.store(swz(dst + r * 128 + c * 2), vals, tag)


def desc_kmajor(sm, start, sbo, mn):
    """[mn, 16] operand of a K-major SW128 descriptor."""
    m = np.arange(mn)[:, None]
    k = np.arange(16)[None, :]
    return sm.load(swz(start + (m % 8) * 128 + (m // 8) * sbo + 2 * k))


def desc_mnmajor(sm, start, lbo, sbo, mn):
    """[16, mn] operand (K x N) of an MN-major SW128 descriptor."""
    k = np.arange(16)[:, None]
    n = np.arange(mn)[None, :]
    return sm.load(swz(start + 2 * (n % 64) + (n // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo))


# Fragment maps for one warpgroup: [128 threads, 64 regs] -> (row, col) of a 64 x 128 tile.
_tid = np.arange(128)[:, None]
_reg = np.arange(64)[None, :]
_w, _lane = _tid // 32, _tid % 32
_g, _t4 = _lane // 4, _lane % 4
ACC_ROW = 16 * _w + _g + 8 * ((_reg % 4) >= 2)
ACC_COL = 8 * (_reg // 4) + 2 * _t4 + (_reg % 2)


def acc_from_matrix(mat):
    return mat[ACC_ROW, ACC_COL]


def matrix_from_acc(regs):
    out = np.zeros((64, 128), dtype=np.float64)
    out[ACC_ROW, ACC_COL] = regs
    return out


def a_frag_to_matrix(pa):
    """pa: [128 threads, 8 k-steps, 4 regs, 2 halves] -> P [64, 128] (register-A layout)."""
    P = np.zeros((64, 128), dtype=np.float64)
    for kk in range(8):
        for j in range(4):
            for half in range(2):
                row = 16 * _w[:, 0] + _g[:, 0] + 8 * (j % 2)
                col = 16 * kk + 8 * (j // 2) + 2 * _t4[:, 0] + half
                P[row, col] = pa[:, kk, j, half]
    return P


def run_block(sm, p, tensors, s, h, qt, out, log, pingpong=False):
    q0, nq = p["q_start"][s], p["q_start"][s + 1] - p["q_start"][s]
    qt0 = qt * kBQ
    if qt0 >= nq:
        return
    k0, nk, pos0 = p["k_start"][s], p["k_start"][s + 1] - p["k_start"][s], p["q_pos0"][s]
    last_q = min(nq, qt0 + kBQ) - 1
    kend = max(0, min(nk, pos0 + last_q + 1))
    n_kt = (kend + kBK - 1) // kBK
    kn, kr, v = tensors
    hr = 0 if p["kr_shared"] else h

    # ---------------- barrier model: phase counts; arrivals
    full_k = [0] * kStages
    full_v = [0] * kStages
    empty_arr = [0] * kStages
    empty_phase = [0] * kStages
    stage_tile = [-1] * kStages  # tile currently in each stage (producer's view)
    readers = [set() for _ in range(kStages)]  # consumer warps still reading the stage

    def producer():
        for kt in range(n_kt):
            st = kt % kStages
            if kt >= kStages:
                # The kernel: BarWait(empty(st), ((kt / kStages) - 1) & 1). Hardware: try_wait.parity(P)
                # passes once the barrier's current phase parity differs from P.
                parity = ((kt // kStages) - 1) & 1
                while (empty_phase[st] & 1) == parity:
                    yield "producer empty wait"
                assert empty_phase[st] == kt // kStages, "empty wait passed on the wrong phase"
                assert not readers[st], "stage overwritten while read"
            row = k0 + kt * kBK
            kdst, vdst = kOffK + st * kKBytes, kOffV + st * kVBytes
            tma_load(sm, kdst, kn, 0, h, row, kt)
            tma_load(sm, kdst + kPanel, kn, 64, h, row, kt)
            tma_load(sm, kdst + 2 * kPanel, kr, 0, hr, row, kt)
            tma_load(sm, vdst, v, 0, h, row, kt)
            tma_load(sm, vdst + kPanel, v, 64, h, row, kt)
            stage_tile[st] = kt
            full_k[st] += 1
            full_v[st] += 1
            yield "producer issued"

    def wait_full(bar, st, kt):
        # The kernel: BarWait(full_x(st), (kt / kStages) & 1); same parity semantics.
        parity = (kt // kStages) & 1
        while (bar[st] & 1) == parity:
            yield "consumer full wait"
        assert bar[st] == kt // kStages + 1, "full wait passed on the wrong phase"
        assert stage_tile[st] == kt, f"stage {st} holds tile {stage_tile[st]}, expected {kt}"

    # Named barriers 3 and 4 (ping-pong turns): [arrived threads, completed phases].
    nbar = {3: [0, 0], 4: [0, 0]}

    def bar_arrive(i):
        nbar[i][0] += 128
        if nbar[i][0] == 256:
            nbar[i] = [0, nbar[i][1] + 1]

    def bar_sync(i):
        phase = nbar[i][1]
        bar_arrive(i)
        while nbar[i][1] == phase:
            yield "consumer named-barrier wait"

    def turn_begin(wg):
        if pingpong:
            yield from bar_sync(3 + wg)

    def turn_end(wg):
        if pingpong:
            bar_arrive(3 + (wg ^ 1))

    def consumer(wg):
        # Q -> swizzled panels (the kernel's formula).
        for c in range(128 * 24):
            ctid = c % 128
            i = c // 128
            cc = ctid + i * 128
            r, col = cc // (kDqk // 4), (cc % (kDqk // 4)) * 4
            qrow = qt0 + wg * 64 + r
            vals = p["q"][q0 + qrow, h, col:col + 4] if qrow < nq else np.zeros(4, np.float32)
            prow, pc = wg * 64 + r, col & 63
            off = (col >> 6) * kPanel + prow * 128 + (((pc >> 3) ^ (prow & 7)) << 4) + (pc & 7) * 2
            sm.store(kOffQ + off + 2 * np.arange(4), bf16(vals), -1)
        yield "q stored"
        o = np.zeros((128, 64))
        m = np.full((128, 2), -np.inf)
        l = np.zeros((128, 2))
        sl2 = p["scale"] * 1.4426950408889634
        row_lo = qt0 + wg * 64 + _w[:, 0] * 16 + _g[:, 0]
        qpos = np.stack([pos0 + row_lo, pos0 + row_lo + 8], axis=1)
        wg_first_pos = pos0 + qt0 + wg * 64
        q_wg = kOffQ + wg * 64 * 128

        def gemm_s(st):
            kb = kOffK + st * kKBytes
            S = np.zeros((64, 128))
            for ks in range(kDqk // 16):
                off = (ks >> 2) * kPanel + (ks & 3) * 32
                A = desc_kmajor(sm, q_wg + off, 1024, 64)
                B = desc_kmajor(sm, kb + off, 1024, 128)
                S += A.astype(np.float64) @ B.astype(np.float64).T
            return acc_from_matrix(S)

        def gemm_pv(st, pa, o):
            vb = kOffV + st * kVBytes
            P = a_frag_to_matrix(pa)
            O = matrix_from_acc(o)
            for kk in range(kBK // 16):
                B = desc_mnmajor(sm, vb + kk * 16 * 128, kPanel, 1024, 128)
                O += P[:, 16 * kk:16 * kk + 16] @ B.astype(np.float64)
            return acc_from_matrix(O)

        def softmax(kt, sc):
            kbase = kt * kBK
            if kbase + kBK > nk or kbase + kBK - 1 > wg_first_pos:
                key = kbase + ACC_COL  # same as kbase + j*8 + 2*t4 + (e&1)
                rowpos = np.where((_reg % 4) >= 2, qpos[:, 1:2], qpos[:, 0:1])
                sc = np.where((key >= nk) | (key > rowpos), -np.inf, sc)
            alpha = np.zeros((128, 2))
            for r in range(2):
                sel = ((_reg % 4) >= 2)[0] == (r == 1)
                mx = sc[:, sel].max(axis=1)
                mx = mx.reshape(32, 4).max(axis=1).repeat(4)  # quad shuffles (xor 1, 2)
                m_new = np.maximum(m[:, r], mx * sl2)
                mu = np.where(m_new == -np.inf, 0.0, m_new)
                alpha[:, r] = np.exp2(m[:, r] - mu)
                m[:, r] = m_new
                l[:, r] *= alpha[:, r]
                pv = np.exp2(sc[:, sel] * sl2 - mu[:, None])
                sc[:, sel] = pv
                l[:, r] += pv.sum(axis=1)
            return sc, alpha

        def to_p(sc):
            pa = np.zeros((128, 8, 4, 2))
            for kk in range(8):
                pa[:, kk, 0] = bf16(sc[:, [(2 * kk) * 4 + 0, (2 * kk) * 4 + 1]])
                pa[:, kk, 1] = bf16(sc[:, [(2 * kk) * 4 + 2, (2 * kk) * 4 + 3]])
                pa[:, kk, 2] = bf16(sc[:, [(2 * kk + 1) * 4 + 0, (2 * kk + 1) * 4 + 1]])
                pa[:, kk, 3] = bf16(sc[:, [(2 * kk + 1) * 4 + 2, (2 * kk + 1) * 4 + 3]])
            return pa

        def release(st):
            # 4 warps of this warpgroup arrive; 8 arrivals complete the phase.
            readers[st].discard(wg)
            empty_arr[st] += 4
            if empty_arr[st] == 8:
                empty_arr[st] = 0
                empty_phase[st] += 1

        if pingpong and wg == 1:
            bar_arrive(3)
        if n_kt > 0:
            yield from wait_full(full_k, 0, 0)
            readers[0].add(wg)
            yield from turn_begin(wg)
            sc = gemm_s(0)
            turn_end(wg)
            sc, _ = softmax(0, sc)
            pa = to_p(sc)
            for kt in range(1, n_kt):
                st, pst = kt % kStages, (kt - 1) % kStages
                yield from wait_full(full_k, st, kt)
                readers[st].add(wg)
                if pingpong:
                    yield from wait_full(full_v, pst, kt - 1)
                yield from turn_begin(wg)
                sc = gemm_s(st)
                if not pingpong:
                    yield from wait_full(full_v, pst, kt - 1)
                o = gemm_pv(pst, pa, o)
                turn_end(wg)
                sc, alpha = softmax(kt, sc)
                release(pst)
                o = o * np.where((_reg % 4) >= 2, alpha[:, 1:2], alpha[:, 0:1])
                pa = to_p(sc)
                yield "consumer tile"
            lst = (n_kt - 1) % kStages
            yield from wait_full(full_v, lst, n_kt - 1)
            yield from turn_begin(wg)
            o = gemm_pv(lst, pa, o)
            turn_end(wg)
            release(lst)
        if pingpong and wg == 0:
            yield from bar_sync(3)
        # quad-reduce l and store
        ltot = l.reshape(32, 4, 2).sum(axis=1).repeat(4, axis=0)
        inv = np.where(ltot > 0, 1.0 / np.where(ltot > 0, ltot, 1), 0.0)
        for r in range(2):
            row = row_lo + 8 * r
            ok = row < nq
            for j in range(16):
                for e in range(2):
                    col = j * 8 + 2 * _t4[:, 0] + e
                    val = o[:, j * 4 + 2 * r + e] * inv[:, r]
                    out[q0 + row[ok], h, col[ok]] = val[ok]
                    log[q0 + row[ok], h, col[ok]] += 1

    actors = [producer(), consumer(0), consumer(1)]
    done = [False] * 3
    stalls = 0
    while not all(done):
        progressed = False
        for i, a in enumerate(actors):
            if done[i]:
                continue
            try:
                msg = next(a)
                if "wait" not in msg:
                    progressed = True
            except StopIteration:
                done[i] = True
                progressed = True
        stalls = 0 if progressed else stalls + 1
        assert stalls < 1000, "deadlock: no actor can progress"
    assert nbar[3][0] == 0 and nbar[4][0] == 0, f"named barrier phase left open at exit: {nbar}"


def reference(p, tensors):
    kn, kr, v = tensors
    q = bf16(p["q"]).astype(np.float64)
    H = q.shape[1]
    out = np.zeros((q.shape[0], H, kDv))
    S = len(p["q_pos0"])
    for s in range(S):
        q0, q1 = p["q_start"][s], p["q_start"][s + 1]
        k0, k1 = p["k_start"][s], p["k_start"][s + 1]
        for h in range(H):
            hr = 0 if p["kr_shared"] else h
            K = np.concatenate([kn[k0:k1, h, :], kr[k0:k1, hr, :]], axis=1).astype(np.float64)
            V = v[k0:k1, h, :].astype(np.float64)
            logits = q[q0:q1, h, :] @ K.T * p["scale"]
            qpos = p["q_pos0"][s] + np.arange(q1 - q0)[:, None]
            logits = np.where(np.arange(k1 - k0)[None, :] > qpos, -np.inf, logits)
            mx = logits.max(axis=1, keepdims=True)
            w = np.exp(logits - mx)
            out[q0:q1, h, :] = (w @ V) / w.sum(axis=1, keepdims=True)
    return out


def run_case(name, seqs, H, kr_shared=True, seed=0, pingpong=False):
    rng = np.random.default_rng(seed)
    qs, ks, pos0 = [0], [0], []
    for nq, nk in seqs:
        qs.append(qs[-1] + nq)
        ks.append(ks[-1] + nk)
        pos0.append(nk - nq)
    Tq, Tk = qs[-1], ks[-1]
    p = {"q": rng.standard_normal((Tq, H, kDqk)).astype(np.float32), "q_start": qs, "k_start": ks,
         "q_pos0": pos0, "scale": 1.3 / np.sqrt(192.0), "kr_shared": kr_shared}
    kn = bf16(rng.standard_normal((Tk, H, kDn)))
    kr = bf16(rng.standard_normal((Tk, 1 if kr_shared else H, kDr)))
    v = bf16(rng.standard_normal((Tk, H, kDv)))
    tensors = (kn, kr, v)
    out = np.full((Tq, H, kDv), np.nan)
    log = np.zeros((Tq, H, kDv), dtype=np.int64)
    sm = Smem(kOffV + kStages * kVBytes)
    max_q = max(n for n, _ in seqs)
    grid_x = (max_q + kBQ - 1) // kBQ
    for s in range(len(seqs)):
        for h in range(H):
            for bx in range(grid_x):
                run_block(sm, p, tensors, s, h, grid_x - 1 - bx, out, log, pingpong)
    ref = reference(p, tensors)
    ok_written = bool((log == 1).all())
    err = np.nanmax(np.abs(out - ref)) if np.isfinite(out).all() else np.inf
    rel = np.sqrt(np.nansum((out - ref) ** 2) / np.sum(ref ** 2))
    ok = ok_written and err <= 2e-2 and rel <= 6e-3
    print(f"{'PASS' if ok else 'FAIL'} {name}{' (ping-pong)' if pingpong else ''}: every output written once: {ok_written}, max_abs {err:.3e}, "
          f"rel_l2 {rel:.3e}")
    return ok


def main():
    cases = [
        ("fresh 200 + chunk 77 after 256 + 1 after 64 + 1-token prompt, 2 heads", [(200, 200), (77, 333), (1, 65), (1, 1)], 2),
        ("chunk 300 after 600 (3 key tiles fully visible), 1 head", [(300, 900)], 1),
        ("lengths 127 / 129 / 257 after 128, 1 head", [(127, 127), (129, 129), (257, 385)], 1),
        ("per-head rope key, 2 heads", [(150, 150), (40, 300)], 2, False),
        ("4 query tiles x 5 key tiles (ring wraps twice), 1 head", [(512, 600)], 1),
    ]
    ok = True
    for pingpong in (False, True):
        for c in cases:
            ok &= run_case(c[0], c[1], c[2], c[3] if len(c) > 3 else True, 0, pingpong)
    print("ALL PASS" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
