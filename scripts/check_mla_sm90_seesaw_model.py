#!/usr/bin/env python3
# Usage: /opt/refenv/bin/python scripts/check_mla_sm90_seesaw_model.py   (numpy; no GPU)
# CPU model of one CTA of the "seesaw" sm90 decode kernel (MlaDecodeSm90SeesawKernel in
# mla_decode_sm90.cu, MlaDecodeParams::sm90_variant = 1 (early release of a stage) and 2 (late
# release)): the two warpgroups' control flow,
# transcribed from the .cu at warpgroup granularity, run under random interleavings against a
# model of the synchronisation hardware:
#  - mbarriers with phase parity (try_wait.parity(P) passes once the phase of parity P has
#    completed; "full": one arrival + 8192 tx bytes per box, "empty": both warpgroups),
#  - named barriers (bar.arrive / bar.sync, 256 threads = both warpgroups; a warpgroup arriving
#    twice in one phase is an error),
#  - TMA box writes landing at random times, wgmma groups completing in order at random times
#    (their shared-memory reads span issue .. completion),
# with every shared-memory region tagged by what it holds (tile t's K box, P_t, m_t, alpha_t).
# Checks: no deadlock; every read (generic or wgmma) sees the expected tile's data for its whole
# span; no TMA write over a region an in-flight wgmma reads; accumulators / S registers / P
# registers never touched while a wgmma using them is in flight; and the result (O, l, m) equals
# the sequential 64-key online softmax with bf16 P (the emulation's algebra) to 1e-12.
import random
import numpy as np

kBN, kDB = 64, 9
def bf16(x):
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)

class Fail(Exception):
    pass

class Sim:
    def __init__(self, ntiles, nvalid_last, rng, rows=8):
        self.rng = rng
        self.ntiles, self.rows = ntiles, rows
        self.nvalid_last = nvalid_last
        # data: scores (already in base 2, scaled) and V per tile; masked keys -inf
        self.S = [rng.standard_normal((rows, kBN)) * 3 for _ in range(ntiles)]
        self.S[ntiles - 1][:, nvalid_last:] = -np.inf
        # some rows fully masked in some tiles (causal limits of MTP rows): row 0 masks tile 0
        if ntiles > 1:
            self.S[0][0, :] = -np.inf
        self.V = [rng.standard_normal((kBN, 8)) for _ in range(ntiles)]  # 4 cols per half
        # smem regions: ('K', st, b) -> tag; ('m', st), ('a', st), ('l', w)
        self.tag = {}
        self.val = {}
        self.version = {}
        self.full_ph = [[0] * kDB for _ in range(2)]      # completed phases
        self.full_pending = [[0] * kDB for _ in range(2)]  # outstanding TMA boxes in the current phase
        self.empty_ph = [0, 0]
        self.empty_cnt = [0, 0]
        self.empty_who = [set(), set()]
        self.nbar = {}      # id -> set of warpgroups arrived in the current phase
        self.nbar_gen = {}  # id -> completed phases
        self.tma_q = []     # (st, b, t)
        self.wg_q = [[], []]  # pending wgmma groups per warpgroup: dict(reads, fn, uses)
        self.log = []

    # ---- hardware
    def write(self, reg, tag, val=None, by=None):
        for w in range(2):
            for g in self.wg_q[w]:
                for (r, _) in g['reads']:
                    if r == reg:
                        raise Fail(f"write {reg} <- {tag} by {by} while an in-flight wgmma of WG{w} reads it")
        self.tag[reg] = tag
        self.val[reg] = val
        self.version[reg] = self.version.get(reg, 0) + 1

    def check_read(self, reg, tag, who):
        if self.tag.get(reg) != tag:
            raise Fail(f"{who} reads {reg}: holds {self.tag.get(reg)}, expected {tag}")

    def par_done(self, completed, par):
        # try_wait.parity(par): true iff the current (incomplete) phase's parity differs from par
        return (completed & 1) != par

    def step_tma(self, i):
        st, b, t = self.tma_q.pop(i)
        self.write(('K', st, b), ('K', t), by='TMA')
        self.full_pending[st][b] -= 1
        if self.full_pending[st][b] == 0:
            self.full_ph[st][b] += 1

    def issue_tile(self, t):
        st = t & 1
        for b in range(kDB):
            if self.full_pending[st][b] != 0:
                raise Fail(f"tile {t}: box {b} re-armed before its previous phase completed")
            self.full_pending[st][b] = 1
            self.tma_q.append((st, b, t))

    def arrive_empty(self, st, w):
        if w in self.empty_who[st]:
            raise Fail(f"WG{w} arrives twice on empty[{st}] in one phase")
        self.empty_who[st].add(w)
        if len(self.empty_who[st]) == 2:
            self.empty_who[st] = set()
            self.empty_ph[st] += 1

    def bar_arrive(self, bid, w):
        s = self.nbar.setdefault(bid, set())
        if w in s:
            raise Fail(f"WG{w} arrives twice on named barrier {bid} in one phase")
        s.add(w)
        if len(s) == 2:
            self.nbar[bid] = set()
            self.nbar_gen[bid] = self.nbar_gen.get(bid, 0) + 1
            return True
        return False

    def complete_wgmma(self, w):
        g = self.wg_q[w][0]
        for (r, tag) in g['reads']:
            self.check_read(r, tag, f"WG{w} wgmma (at completion)")
        self.wg_q[w].pop(0)
        g['fn']()

    def uses_pending(self, w, what):
        return any(what in g['uses'] for g in self.wg_q[w])

    # ---- one warpgroup's program (transcribed from MlaDecodeSm90SeesawKernel)
    def program(self, wg):
        R = self.rows
        st_ = {'acc': np.zeros((R, 4)), 'm_run': np.full(R, -np.inf), 'l_run': np.zeros(R), 'sc': None, 'pa': None}
        other = wg ^ 1
        ntiles = self.ntiles
        def touch(what):
            if self.uses_pending(wg, what):
                raise Fail(f"WG{wg} touches {what} while a wgmma using it is in flight")
        for t in range(ntiles):
            full_par = (t >> 1) & 1
            if (t & 1) == wg:
                if self.early:  # variant 1: drain the P V of tile t - 1, release it, then S_t
                    yield ('wait_group', wg, 0)
                    touch('acc')
                    if t >= 1:
                        self.arrive_empty(other, wg)
                nvalid = self.nvalid_last if t == ntiles - 1 else kBN
                if nvalid < kBN:
                    for b in range(kDB):
                        yield ('wait_full', wg, b, full_par)
                    for b in range(kDB):
                        self.check_read(('K', wg, b), ('K', t), f"WG{wg} zeroing")
                        self.write(('K', wg, b), ('Kz', t), by=f"WG{wg} zeroing")
                ktag = ('Kz', t) if nvalid < kBN else ('K', t)
                reads = []
                for b in range(kDB):
                    yield ('wait_full', wg, b, full_par)
                    self.check_read(('K', wg, b), ktag, f"WG{wg} S issue")
                    reads.append((('K', wg, b), ktag))
                touch('sc')
                def s_done(t=t):
                    st_['sc'] = self.S[t].copy()
                self.wg_q[wg].append({'reads': reads, 'fn': s_done, 'uses': {'sc'}})
                yield ('wait_group', wg, 0)
                touch('sc'); touch('acc')
                if not self.early and t >= 1:  # variant 2: release tile t - 1 after S_t
                    self.arrive_empty(other, wg)
                sc = st_['sc']
                mx = sc.max(axis=1)
                m_new = np.maximum(st_['m_run'], mx)
                muse = np.where(m_new == -np.inf, 0.0, m_new)
                alpha = np.exp2(st_['m_run'] - muse)
                st_['m_run'] = m_new
                pv = np.exp2(sc - muse[:, None])
                st_['l_run'] = st_['l_run'] * alpha + pv.sum(axis=1)
                touch('pa')
                st_['pa'] = bf16(pv)
                # publish P_t into the rope box of stage wg, m_t, alpha_t
                self.check_read(('K', wg, kDB - 1), ktag, f"WG{wg} P store (rope box must hold tile t)")
                self.write(('K', wg, kDB - 1), ('P', t), st_['pa'].copy(), by=f"WG{wg} P store")
                self.write(('m', wg), ('m', t), st_['m_run'].copy(), by=f"WG{wg}")
                self.write(('a', wg), ('a', t), alpha.copy(), by=f"WG{wg}")
                yield ('bar_arrive', wg, 1 + wg)
                touch('acc')
                st_['acc'] = st_['acc'] * alpha[:, None]
                vreads = [(('K', wg, b), ktag) for b in range(4 * wg, 4 * wg + 4)]
                def pv_own(t=t, pa=st_['pa']):
                    st_['acc'] = st_['acc'] + pa @ self.V[t][:, 4 * wg:4 * wg + 4]
                self.wg_q[wg].append({'reads': vreads, 'fn': pv_own, 'uses': {'acc', 'pa'}})
            else:
                yield ('wait_group', wg, 0)
                touch('acc')
                if t >= 1:
                    self.arrive_empty(wg, wg)
                    if t + 1 < ntiles:
                        yield ('wait_empty', wg, ((t - 1) >> 1) & 1)
                        self.issue_tile(t + 1)
                yield ('bar_sync', wg, 1 + other)
                # the owner's publication of tile t
                self.check_read(('a', other), ('a', t), f"WG{wg} alpha read")
                self.check_read(('m', other), ('m', t), f"WG{wg} m read")
                alpha = self.val[('a', other)].copy()
                st_['m_run'] = self.val[('m', other)].copy()
                st_['l_run'] = st_['l_run'] * alpha
                for b in range(4 * wg, 4 * wg + 4):
                    yield ('wait_full', other, b, full_par)
                st_['acc'] = st_['acc'] * alpha[:, None]
                ktag = ('Kz', t) if (t == ntiles - 1 and self.nvalid_last < kBN) else ('K', t)
                reads = [(('K', other, kDB - 1), ('P', t))] + [(('K', other, b), ktag) for b in range(4 * wg, 4 * wg + 4)]
                for r, tg in reads:
                    self.check_read(r, tg, f"WG{wg} PV(ss) issue")
                def pv_ss(t=t, other=other):
                    P = self.val[('K', other, kDB - 1)]
                    st_['acc'] = st_['acc'] + P @ self.V[t][:, 4 * wg:4 * wg + 4]
                self.wg_q[wg].append({'reads': reads, 'fn': pv_ss, 'uses': {'acc'}})
        yield ('wait_group', wg, 0)
        self.write(('l', wg), ('l', wg), st_['l_run'].copy(), by=f"WG{wg}")
        yield ('bar_sync', wg, 5)
        l = self.val[('l', 0)] + self.val[('l', 1)]
        self.result[wg] = (st_['acc'], l, st_['m_run'])

    def run(self):
        self.result = [None, None]
        # start: tiles 0, 1 issued
        for t in range(min(2, self.ntiles)):
            self.issue_tile(t)
        progs = [self.program(0), self.program(1)]
        blocked = [None, None]  # pending action of each program
        done = [False, False]
        def runnable(w):
            a = blocked[w]
            if a is None:
                return True
            kind = a[0]
            if kind == 'wait_full':
                st, b, par = a[1], a[2], a[3]
                return self.par_done(self.full_ph[st][b], par)
            if kind == 'wait_empty':
                return self.par_done(self.empty_ph[a[1]], a[2])
            if kind == 'wait_group':
                return len(self.wg_q[a[1]]) <= a[2]
            if kind == 'bar_sync_wait':
                return self.nbar_gen.get(a[2], 0) >= a[3]
            return True
        steps = 0
        while not all(done):
            steps += 1
            if steps > 100000:
                raise Fail("no progress (livelock)")
            choices = [('wg', w) for w in range(2) if not done[w] and runnable(w)]
            choices += [('tma', i) for i in range(len(self.tma_q))]
            choices += [('mma', w) for w in range(2) if self.wg_q[w]]
            if not choices:
                raise Fail(f"deadlock: WG0 at {blocked[0]}, WG1 at {blocked[1]}")
            wts = [1.0 if k == 'wg' else self.w_tma if k == 'tma' else self.w_mma for (k, _) in choices]
            c = self.rng_py.choices(choices, weights=wts)[0]
            if c[0] == 'tma':
                self.step_tma(c[1])
                continue
            if c[0] == 'mma':
                self.complete_wgmma(c[1])
                continue
            w = c[1]
            a = blocked[w]
            blocked[w] = None
            if a is not None and a[0] == 'bar_sync':
                # bar.sync = arrive + wait for the phase to complete
                gen = self.nbar_gen.get(a[2], 0)
                self.bar_arrive(a[2], w)
                blocked[w] = ('bar_sync_wait', w, a[2], gen + 1)
                if runnable(w):
                    blocked[w] = None
                else:
                    continue
            elif a is not None and a[0] == 'bar_arrive':
                self.bar_arrive(a[2], w)
            try:
                nxt = next(progs[w])
            except StopIteration:
                done[w] = True
                continue
            blocked[w] = nxt
        if self.tma_q:
            raise Fail("TMA boxes still in flight at the end")

def reference(sim):
    R = sim.rows
    m = np.full(R, -np.inf); l = np.zeros(R); O = np.zeros((R, 8))
    for t in range(sim.ntiles):
        sc = sim.S[t]
        m_new = np.maximum(m, sc.max(axis=1))
        muse = np.where(m_new == -np.inf, 0.0, m_new)
        alpha = np.exp2(m - muse)
        pv = np.exp2(sc - muse[:, None])
        l = l * alpha + pv.sum(axis=1)
        O = O * alpha[:, None] + bf16(pv) @ sim.V[t]
        m = m_new
    return O, l, m

def randomize_speeds(sim, seed, ntiles, nvalid):
    """The interleaving's random source, and how fast TMA boxes land and wgmma groups complete
    relative to the warpgroups' progress (slow ones keep reads / registers in flight for long)."""
    sim.rng_py = random.Random(seed * 1000 + ntiles * 10 + nvalid)
    sim.w_tma = sim.rng_py.choice([0.01, 0.2, 1.0, 5.0])
    sim.w_mma = sim.rng_py.choice([0.01, 0.2, 1.0, 5.0])


def check_result(sim, O_ref, l_ref, m_ref, key):
    """Both warpgroups' row sums and maxima, and the concatenated O, against a reference (1e-12)."""
    O = np.concatenate([sim.result[0][0], sim.result[1][0]], axis=1)
    for w in range(2):
        assert np.allclose(sim.result[w][1], l_ref, rtol=1e-12, atol=0), key + ('l',)
        assert np.array_equal(sim.result[w][2], m_ref), key + ('m',)
    err = np.abs(O - O_ref).max() / max(1e-300, np.abs(O_ref).max())
    assert err < 1e-12, key + (err,)
    return O


def main():
    n = 0
    for early in (True, False):
        for ntiles in range(1, 8):
            for nvalid in (1, 37, 63, 64):
                for seed in range(40):
                    rng = np.random.default_rng(seed * 131 + ntiles * 7 + nvalid)
                    sim = Sim(ntiles, nvalid, rng)
                    sim.early = early
                    randomize_speeds(sim, seed, ntiles, nvalid)
                    try:
                        sim.run()
                    except Fail as e:
                        print(f"FAIL variant {1 if early else 2} ntiles={ntiles} nvalid={nvalid} seed={seed}: {e}")
                        raise SystemExit(1)
                    check_result(sim, *reference(sim), (ntiles, nvalid, seed))
                    n += 1
    print(f"seesaw schedule model (variants 1 and 2): {n} random interleavings (1-7 tiles, partial last "
          "tiles) OK: no deadlock, no stale / overwritten reads, no register hazards, O / l / m = the "
          "sequential 64-key online softmax with bf16 P")


if __name__ == '__main__':
    main()
