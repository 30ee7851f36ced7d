#!/usr/bin/env python3
# Usage: /opt/refenv/bin/python scripts/check_mla_sm90_pair_model.py   (numpy; no GPU)
# CPU model of one CTA of the tile-pair sm90 decode kernel (MlaDecodeSm90PairKernel in
# mla_decode_sm90_pair.cu, MlaDecodeParams::sm90_variant = 11): the two warpgroups' control flow,
# transcribed from the .cu at warpgroup granularity, run under random interleavings against the
# synchronisation-hardware model of check_mla_sm90_seesaw_model.py (mbarriers with phase parity,
# named barriers of two warpgroups, TMA boxes landing at random times, wgmma groups completing in
# order at random times with their shared-memory reads spanning issue .. completion). Variant 11
# re-arms boxes individually, without "empty" barriers: boxes 0-3 by warpgroup 0 after its P V on
# them, 4-7 by warpgroup 1 after its P V on them, the rope box 8 by warpgroup 1 at the start of its
# pair iteration. Every shared-memory region is tagged by what it holds (tile t's box, P0 / P1 of
# a pair, the running max, scale0, scale1).
# The warpgroups' programs yield at every wait and after every barrier arrival, so the other
# warpgroup, the TMA and the wgmmas interleave there.
# Checks: no deadlock (which also catches an mbarrier that completes two phases before its waiter
# looks: the waiter then never sees its parity); every read (generic or wgmma) sees the expected
# data for its whole span; no write (TMA or generic) over a region an in-flight wgmma reads;
# accumulators / S registers / P registers never touched while a wgmma using them is in flight;
# and the result (O, l, m) equals the kernel's pair algebra computed sequentially (one max update a
# pair, the even tile's P rounded to bf16 after its rescale) to 1e-12, and the plain 64-key online
# softmax within bf16 rounding.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_mla_sm90_seesaw_model import (Fail, Sim, bf16, check_result, kBN, kDB,  # noqa: E402
                                         randomize_speeds, reference)

ORDER0 = [0, 1, 2, 3, 8, 4, 5, 6, 7]  # the order warpgroup 0 waits for its tiles' boxes
ORDER1 = [8, 4, 5, 6, 7, 0, 1, 2, 3]  # warpgroup 1's
BAR_SCALE0, BAR_SCALE1, BAR_P0, BAR_P1, BAR_END = 1, 2, 3, 4, 7
# --mutate N: a deliberate schedule bug, to show the model catches it (each must FAIL):
#  1 warpgroup 0 re-arms boxes 0-3 of t + 2 before its P V on tile t completed;
#  2 warpgroup 1 re-arms boxes 4-7 of t + 2 before its P0' V_R(t) completed;
#  3 warpgroup 0 reads P1 without waiting for warpgroup 1's hand-off;
#  4 warpgroup 1 re-arms the rope boxes before the Scale0 hand-off (S(t) may still read box 8);
#  5 warpgroup 0 waits for its S boxes with the wrong parity;
#  6 no zeroing of the partial last tile.
MUTATE = int(sys.argv[sys.argv.index('--mutate') + 1]) if '--mutate' in sys.argv else 0


class PairSim(Sim):
    def issue_boxes(self, t, boxes):
        st = t & 1
        for b in boxes:
            if self.full_pending[st][b] != 0:
                raise Fail(f"tile {t}: box {b} re-armed before its previous phase completed")
            self.full_pending[st][b] = 1
            self.tma_q.append((st, b, t))

    def ktag(self, t):
        if MUTATE == 6:  # (the readers expect zeroed boxes all the same)
            return ('Kz', t) if (t == self.ntiles - 1 and self.nvalid_last < kBN) else ('K', t)
        return ('Kz', t) if (t == self.ntiles - 1 and self.nvalid_last < kBN) else ('K', t)

    def softmax(self, sc, m_prev):
        mx = sc.max(axis=1)
        m_new = np.maximum(m_prev, mx)
        muse = np.where(m_new == -np.inf, 0.0, m_new)
        scale = np.where(m_new == m_prev, 1.0, np.exp2(m_prev - muse))
        p = np.exp2(sc - muse[:, None])
        return m_new, scale, p

    def program(self, wg):
        ntiles, st_ = self.ntiles, {'acc': np.zeros((self.rows, 4)), 'l': np.zeros(self.rows), 'sc': None, 'pa': None}
        half = slice(4 * wg, 4 * wg + 4)  # this warpgroup's value columns (4 in the model)

        def touch(what):
            if self.uses_pending(wg, what):
                raise Fail(f"WG{wg} touches {what} while a wgmma using it is in flight")

        def issue_s(t, order, n_first, second):
            st, par = t & 1, (t >> 1) & 1
            if MUTATE == 5 and wg == 0:
                par ^= 1
            if not second:
                nvalid = self.nvalid_last if t == ntiles - 1 else kBN
                if nvalid < kBN and MUTATE != 6:  # every box landed, rows past the context zeroed, then the wgmmas
                    for b in range(kDB):
                        yield ('wait_full', st, b, par)
                    for b in range(kDB):
                        self.check_read(('K', st, b), ('K', t), f"WG{wg} zeroing")
                        self.write(('K', st, b), ('Kz', t), by=f"WG{wg} zeroing")
                touch('sc')
            boxes = order[n_first:] if second else order[:n_first]
            reads = []
            for b in boxes:
                yield ('wait_full', st, b, par)
                self.check_read(('K', st, b), self.ktag(t), f"WG{wg} S({t}) issue")
                reads.append((('K', st, b), self.ktag(t)))
            last = second or n_first == kDB

            def s_done(t=t, last=last):
                if last:
                    st_['sc'] = self.S[t].copy()
            self.wg_q[wg].append({'reads': reads, 'fn': s_done, 'uses': {'sc'}})

        def pv(t, p_reg, p_tag, p_val):
            st = t & 1
            reads = [(('K', st, b), self.ktag(t)) for b in range(4 * wg, 4 * wg + 4)]
            if p_reg is not None:
                reads.append((p_reg, p_tag))
            for r, tg in reads:
                self.check_read(r, tg, f"WG{wg} P V({t}) issue")

            def done(t=t, p_reg=p_reg, p_val=p_val):
                P = self.val[p_reg] if p_reg is not None else p_val
                st_['acc'] = st_['acc'] + P @ self.V[t][:, half]
            self.wg_q[wg].append({'reads': reads, 'fn': done, 'uses': {'acc', 'pa'} if p_reg is None else {'acc'}})

        if wg == 0:
            yield from issue_s(0, ORDER0, kDB, False)
            yield ('wait_group', wg, 0)
            for t in range(0, ntiles, 2):
                has1, has2, has3 = t + 1 < ntiles, t + 2 < ntiles, t + 3 < ntiles
                touch('sc')
                self.check_read(('m',), ('m', t - 1), "WG0 m read")
                m0, scale0, p0 = self.softmax(st_['sc'], self.val[('m',)])
                self.write(('m',), ('m', t), m0.copy(), by="WG0")
                self.write(('s0',), ('s0', t), scale0.copy(), by="WG0")
                st_['l'] = st_['l'] * scale0 + p0.sum(axis=1)
                yield ('bar_arrive', wg, BAR_SCALE0)
                yield ('step', wg)  # (a scheduling point: what follows is not atomic with the arrival)
                touch('acc')
                st_['acc'] = st_['acc'] * scale0[:, None]
                touch('pa')
                st_['pa'] = bf16(p0)
                pv(t, None, None, st_['pa'])
                yield ('bar_sync', wg, BAR_SCALE1)
                self.check_read(('s1',), ('s1', t), "WG0 scale1 read")
                scale1 = self.val[('s1',)].copy()
                self.write(('P0',), ('P0', t), bf16(p0 * scale1[:, None]), by="WG0 P0' store")
                yield ('bar_arrive', wg, BAR_P0)
                yield ('step', wg)  # (a scheduling point: what follows is not atomic with the arrival)
                if has2 and MUTATE == 1:
                    self.issue_boxes(t + 2, [0, 1, 2, 3])
                yield ('wait_group', wg, 0)
                touch('acc')
                touch('pa')
                if has2 and MUTATE != 1:
                    self.issue_boxes(t + 2, [0, 1, 2, 3])
                st_['acc'] = st_['acc'] * scale1[:, None]
                st_['l'] = st_['l'] * scale1
                if has1:
                    if MUTATE == 3:
                        yield ('bar_arrive', wg, BAR_P1)
                        yield ('step', wg)  # (a scheduling point: what follows is not atomic with the arrival)  # (keeps the barrier's arrival count)
                    else:
                        yield ('bar_sync', wg, BAR_P1)
                    pv(t + 1, ('P1',), ('P1', t + 1), None)
                if has2:
                    yield from issue_s(t + 2, ORDER0, 5, False)
                if has1 and has3:
                    yield ('wait_group', wg, 1)
                    self.issue_boxes(t + 3, [0, 1, 2, 3])
                if has2:
                    yield from issue_s(t + 2, ORDER0, 5, True)
                yield ('wait_group', wg, 0)
        else:
            if ntiles > 1:
                yield from issue_s(1, ORDER1, kDB, False)
                yield ('wait_group', wg, 0)
            for t in range(0, ntiles, 2):
                has1, has2, has3 = t + 1 < ntiles, t + 2 < ntiles, t + 3 < ntiles
                if MUTATE == 4 and has2:
                    self.issue_boxes(t + 2, [8])
                yield ('bar_sync', wg, BAR_SCALE0)
                if has2 and MUTATE != 4:
                    self.issue_boxes(t + 2, [8])
                if has3:
                    self.issue_boxes(t + 3, [8])
                self.check_read(('m',), ('m', t), "WG1 m read")
                self.check_read(('s0',), ('s0', t), "WG1 scale0 read")
                m0, scale0 = self.val[('m',)].copy(), self.val[('s0',)].copy()
                if has1:
                    touch('sc')
                    m1, scale1, p1 = self.softmax(st_['sc'], m0)
                    self.write(('m',), ('m', t + 1), m1.copy(), by="WG1")
                    self.write(('s1',), ('s1', t), scale1.copy(), by="WG1")
                    st_['l'] = st_['l'] * (scale0 * scale1) + p1.sum(axis=1)
                else:
                    scale1 = np.ones(self.rows)
                    self.write(('s1',), ('s1', t), scale1.copy(), by="WG1")
                    st_['l'] = st_['l'] * scale0
                yield ('bar_arrive', wg, BAR_SCALE1)
                yield ('step', wg)  # (a scheduling point: what follows is not atomic with the arrival)
                touch('acc')
                st_['acc'] = st_['acc'] * (scale0 * scale1)[:, None]
                if has1:
                    touch('pa')
                    st_['pa'] = bf16(p1)
                    self.write(('P1',), ('P1', t + 1), st_['pa'].copy(), by="WG1 P1 store")
                    pv(t + 1, None, None, st_['pa'])
                yield ('bar_sync', wg, BAR_P0)
                pv(t, ('P0',), ('P0', t), None)
                if has1:
                    if MUTATE == 3:
                        yield ('bar_sync', wg, BAR_P1)  # (the other side of mutation 3's swap)
                    else:
                        yield ('bar_arrive', wg, BAR_P1)
                        yield ('step', wg)  # (a scheduling point: what follows is not atomic with the arrival)
                    yield ('wait_group', wg, 1)
                    touch('pa')
                    if has3:
                        self.issue_boxes(t + 3, [4, 5, 6, 7])
                if has2 and MUTATE == 2:
                    self.issue_boxes(t + 2, [4, 5, 6, 7])
                yield ('wait_group', wg, 0)
                touch('acc')
                if has2 and MUTATE != 2:
                    self.issue_boxes(t + 2, [4, 5, 6, 7])
                if has3:
                    yield from issue_s(t + 3, ORDER1, kDB, False)
                    yield ('wait_group', wg, 0)
        yield ('wait_group', wg, 0)
        self.write(('l', wg), ('l', wg), st_['l'].copy(), by=f"WG{wg}")
        yield ('bar_sync', wg, BAR_END)
        l = self.val[('l', 0)] + self.val[('l', 1)]
        self.check_read(('m',), ('m', ntiles - 1), f"WG{wg} final m")
        self.result[wg] = (st_['acc'], l, self.val[('m',)].copy())


def pair_reference(sim):
    """The kernel's algebra, sequentially: one max update a pair, P0 handed over rescaled."""
    R = sim.rows
    m = np.full(R, -np.inf)
    l0, l1 = np.zeros(R), np.zeros(R)
    OL, OR = np.zeros((R, 4)), np.zeros((R, 4))
    for t in range(0, sim.ntiles, 2):
        has1 = t + 1 < sim.ntiles
        m0, s0, p0 = PairSim.softmax(None, sim.S[t], m)
        if has1:
            m1, s1, p1 = PairSim.softmax(None, sim.S[t + 1], m0)
        else:
            m1, s1 = m0, np.ones(R)
        l0 = (l0 * s0 + p0.sum(axis=1)) * s1
        OL = (OL * s0[:, None] + bf16(p0) @ sim.V[t][:, 0:4]) * s1[:, None]
        OR = OR * (s0 * s1)[:, None]
        l1 = l1 * (s0 * s1)
        if has1:
            l1 = l1 + p1.sum(axis=1)
            OL = OL + bf16(p1) @ sim.V[t + 1][:, 0:4]
            OR = OR + bf16(p1) @ sim.V[t + 1][:, 4:8]
        OR = OR + bf16(p0 * s1[:, None]) @ sim.V[t][:, 4:8]
        m = m1
    return np.concatenate([OL, OR], axis=1), l0 + l1, m


def main():
    n = 0
    worst = 0.0
    for ntiles in range(1, 9):
        for nvalid in (1, 37, 63, 64):
            for seed in range(40):
                rng = np.random.default_rng(seed * 131 + ntiles * 7 + nvalid)
                sim = PairSim(ntiles, nvalid, rng)
                sim.val[('m',)] = np.full(sim.rows, -np.inf)
                sim.tag[('m',)] = ('m', -1)
                randomize_speeds(sim, seed, ntiles, nvalid)
                try:
                    sim.run()
                except Fail as e:
                    print(f"FAIL ntiles={ntiles} nvalid={nvalid} seed={seed}: {e}")
                    raise SystemExit(1)
                _, l_ref, _ = pair = pair_reference(sim)
                O = check_result(sim, *pair, (ntiles, nvalid, seed))
                # Against the plain 64-key online softmax: only bf16 roundings of P differ.
                O_seq, l_seq, _ = reference(sim)
                ls = np.where(l_seq > 0, l_seq, 1.0)
                lp = np.where(l_ref > 0, l_ref, 1.0)
                dev = np.abs(O / lp[:, None] - O_seq / ls[:, None]).max() / max(1e-300, np.abs(O_seq / ls[:, None]).max())
                worst = max(worst, dev)
                assert dev < 2e-2, (ntiles, nvalid, seed, dev)
                n += 1
    print(f"tile-pair schedule model (variant 11): {n} random interleavings (1-8 tiles, partial last tiles) OK: "
          "no deadlock, no stale / overwritten reads, no register hazards, O / l / m = the pair algebra to "
          f"1e-12; normalised O within {worst:.1e} of the plain online softmax (bf16 P roundings)")


if __name__ == '__main__':
    main()
