#!/usr/bin/env python3
# Usage: /opt/refenv/bin/python scripts/check_mla_sm90_model.py   (numpy; no GPU). Prints errors 0.0 and OK lines.
# CPU model of one CTA of mla_decode_sm90.cu: the kernel's own address / descriptor / fragment
# arithmetic (transcribed from the .cu) run against an independent model of the hardware
# (TMA SWIZZLE_128B writes; wgmma reading operands through decoded descriptors with the
# address-bit swizzle; the documented accumulator / A-register fragment layouts).
import numpy as np
rng = np.random.default_rng(0)
kD, kV, kBM, kBN, kDB, kBox = 576, 512, 64, 64, 9, 64 * 128
kTile = kDB * kBox
OFF_Q, OFF_K = 0, kTile
OFF_P = OFF_K + 2 * kTile
SMEM = np.zeros(OFF_P + kBox, dtype=np.uint8)
def bf16(x):  # round to bf16, keep as float32
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)
def st_bf16(addr, v):
    SMEM[addr:addr + 2] = np.frombuffer(bf16(np.float32(v)).tobytes()[2:4], np.uint8)
def ld_bf16(addr):
    b = bytes(2) + SMEM[addr:addr + 2].tobytes()
    return np.frombuffer(b, np.float32)[0]
# ---- hardware model
def hw_swz(addr):  # 128B swizzle on address bits: [4:6] ^= [7:9]
    return addr ^ (((addr >> 7) & 7) << 4)
def tma_box(dst, box):  # box [64 rows][64 cols] of fp32 values (bf16-exact)
    for r in range(64):
        for c in range(64):
            st_bf16(hw_swz(dst + r * 128 + c * 2) if True else 0, box[r, c])
def desc_decode(d):
    start = (d & 0x3FFF) << 4
    lbo = ((d >> 16) & 0x3FFF) << 4
    sbo = ((d >> 32) & 0x3FFF) << 4
    assert (d >> 62) == 1
    return start, lbo, sbo
def hw_read_kmajor(d, M):  # [M x 16] operand, K-major, 128B swizzle
    start, lbo, sbo = desc_decode(d)
    out = np.zeros((M, 16), np.float32)
    for m in range(M):
        for k in range(16):
            out[m, k] = ld_bf16(hw_swz(start + (m % 8) * 128 + (m // 8) * sbo + k * 2))
    return out
def hw_read_mnmajor(d, N):  # B [16 x N], MN-major, 128B swizzle: returns [16, N]
    start, lbo, sbo = desc_decode(d)
    out = np.zeros((16, N), np.float32)
    for n in range(N):
        for k in range(16):
            out[k, n] = ld_bf16(hw_swz(start + (n % 64) * 2 + (n // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo))
    return out
def acc_pos(t, i):  # thread t of the warpgroup, accumulator register i -> (row, col)
    w, lane = t // 32, t % 32
    g, tq = lane // 4, lane % 4
    j, c = i // 4, i % 4
    return 16 * w + g + 8 * (c >> 1), 8 * j + 2 * tq + (c & 1)
def a_pos(t, reg, half):  # A fragment (m64k16): register reg (0..3), half (low/high bf16) -> (row, k)
    w, lane = t // 32, t % 32
    g, tq = lane // 4, lane % 4
    return 16 * w + g + 8 * (reg & 1), 2 * tq + 8 * (reg >> 1) + half
# ---- the kernel's arithmetic (transcribed)
def SwzOff(r, c): return r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2
def Desc(addr, lbo, sbo): return ((addr & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1 << 62)
def DescKMajor(base, ks): return Desc(base + (ks >> 2) * kBox + (ks & 3) * 32, 16, 1024)
def DescV(tile, box0, kk): return Desc(tile + box0 * kBox + kk * 2048, kBox, 1024)
# ---- one CTA, one tile: Q (64 rows), K tile (64 keys), nvalid keys
nvalid = 37
base = 0x10000  # a 1024-aligned shared address
Q = bf16(rng.standard_normal((64, kD)).astype(np.float32) * 0.3)
K = bf16(rng.standard_normal((64, kD)).astype(np.float32))
K[nvalid:] = np.nan
# Q store (kernel: smem + kOffQ + (c >> 6) * kBoxBytes + SwzOff(r, c & 63), 4 values)
for r in range(64):
    for c in range(0, kD, 4):
        a = OFF_Q + (c >> 6) * kBox + SwzOff(r, c & 63)
        for e in range(4): st_bf16(a + 2 * e, Q[r, c + e])
# TMA: 9 boxes of the tile into stage 0 (hardware model)
for b in range(kDB): tma_box(OFF_K + b * kBox, K[:, b * 64:(b + 1) * 64])
# zero rows past nvalid (kernel: t + b * kBoxBytes + nvalid * 128 + e * 16)
nz = (kBN - nvalid) * 8
for idx in range(kDB * nz):
    b, e = idx // nz, idx % nz
    SMEM[OFF_K + b * kBox + nvalid * 128 + e * 16: OFF_K + b * kBox + nvalid * 128 + e * 16 + 16] = 0
# S = Q K^T through the descriptors (kernel: dq + off, dk + off); SMEM offsets relative to base
S = np.zeros((64, 64), np.float64)
dq, dk = DescKMajor(OFF_Q, 0), DescKMajor(OFF_K, 0)
for ks in range(kD // 16):
    off = ((ks >> 2) * kBox + (ks & 3) * 32) >> 4
    A = hw_read_kmajor(dq + off, 64)
    B = hw_read_kmajor(dk + off, 64)  # [N=64 keys x 16]
    S += A.astype(np.float64) @ B.astype(np.float64).T
Kz = np.where(np.isnan(K), 0, K)
ref_S = Q.astype(np.float64) @ Kz.astype(np.float64).T
print("S max err", np.abs(S - ref_S).max())
# registers: sc[i] of thread t = S[acc_pos(t, i)]
P = np.exp2(S * 0.2 - (S * 0.2).max())  # any values: test the data movement only
P = bf16(P.astype(np.float32))
sc = [[P[acc_pos(t, i)] for i in range(32)] for t in range(128)]
# pa packing (kernel), then check the A fragment identity
for t in range(128):
    pa = []
    for kk in range(4):
        s = sc[t]
        pa += [(s[(2*kk)*4+0], s[(2*kk)*4+1]), (s[(2*kk)*4+2], s[(2*kk)*4+3]),
               (s[(2*kk+1)*4+0], s[(2*kk+1)*4+1]), (s[(2*kk+1)*4+2], s[(2*kk+1)*4+3])]
    for kk in range(4):
        for reg in range(4):
            for half in range(2):
                r, k = a_pos(t, reg, half)
                assert pa[kk * 4 + reg][half] == P[r, 16 * kk + k], (t, kk, reg, half)
    # P stores (kernel): SwzOff(my_row[hr], j * 8 + 2 * tq) <- pa[(j >> 1) * 4 + (j & 1) * 2 + hr]
    w, lane = t // 32, t % 32
    g, tq = lane // 4, lane % 4
    for j in range(8):
        for hr in range(2):
            row = w * 16 + g + 8 * hr
            v = pa[(j >> 1) * 4 + (j & 1) * 2 + hr]
            st_bf16(OFF_P + SwzOff(row, j * 8 + 2 * tq), v[0])
            st_bf16(OFF_P + SwzOff(row, j * 8 + 2 * tq) + 2, v[1])
print("A-fragment identity OK")
# WG1: P from shared memory through DescKMajor(sP, kk); V half through DescV(kt, 4, kk)
O1 = np.zeros((64, 256)); O0 = np.zeros((64, 256))
for kk in range(4):
    Ap = hw_read_kmajor(DescKMajor(OFF_P, kk), 64)
    assert np.array_equal(Ap, P[:, 16 * kk:16 * kk + 16]), kk
    B1 = hw_read_mnmajor(DescV(OFF_K, 4, kk), 256)
    B0 = hw_read_mnmajor(DescV(OFF_K, 0, kk), 256)
    O1 += Ap.astype(np.float64) @ B1
    O0 += P[:, 16 * kk:16 * kk + 16].astype(np.float64) @ B0
ref_O = P.astype(np.float64) @ Kz[:, :512].astype(np.float64)
print("O (WG0 cols 0-255) max err", np.abs(O0 - ref_O[:, :256]).max(), " (WG1 cols 256-511)", np.abs(O1 - ref_O[:, 256:]).max())
# output mapping (kernel): acc[j*4 + 2*hr + e] -> row my_row[hr], col col0 + 8j + 2tq + e
for t in range(128):
    for i in range(128):
        r, c = acc_pos(t, i)
        w, lane = t // 32, t % 32
        g, tq = lane // 4, lane % 4
        j, hr, e = i // 4, (i % 4) >> 1, i & 1
        assert (r, c) == (w * 16 + g + 8 * hr, 8 * j + 2 * tq + e)
print("output mapping OK")
# ---- the seesaw variant (sm90_variant = 1): tile in stage 1, P_t stored into that stage's rope box
# (box 8: kernel pbox = smem + kSsOffK + wg * kTileBytes + (kDB - 1) * kBoxBytes, the same P-store
# arithmetic), read by the other warpgroup through DescKMajor(pbox, kk) and its V half through
# DescV(other_stage, 4 * wg, kk); the owner's own half through DescV(my_stage, 4 * wg, kk).
ST1 = OFF_K + kTile
for b in range(kDB): tma_box(ST1 + b * kBox, K[:, b * 64:(b + 1) * 64])
for idx in range(kDB * nz):
    b, e = idx // nz, idx % nz
    SMEM[ST1 + b * kBox + nvalid * 128 + e * 16: ST1 + b * kBox + nvalid * 128 + e * 16 + 16] = 0
PBOX = ST1 + (kDB - 1) * kBox
for t in range(128):
    w, lane = t // 32, t % 32
    g, tq = lane // 4, lane % 4
    for j in range(8):
        for hr in range(2):
            row = w * 16 + g + 8 * hr
            kk, reg = j >> 1, (j & 1) * 2 + hr
            v = (P[row, 16 * kk + 8 * (reg >> 1) + 2 * tq], P[row, 16 * kk + 8 * (reg >> 1) + 2 * tq + 1])
            st_bf16(PBOX + SwzOff(row, j * 8 + 2 * tq), v[0])
            st_bf16(PBOX + SwzOff(row, j * 8 + 2 * tq) + 2, v[1])
for wg in range(2):
    Ow = np.zeros((64, 256))
    for kk in range(4):
        Ap = hw_read_kmajor(DescKMajor(PBOX, kk), 64)
        assert np.array_equal(Ap, P[:, 16 * kk:16 * kk + 16]), (wg, kk)
        Ow += Ap.astype(np.float64) @ hw_read_mnmajor(DescV(ST1, 4 * wg, kk), 256)
    print(f"seesaw: P from the rope box of stage 1, O half {wg} max err",
          np.abs(Ow - ref_O[:, 256 * wg:256 * wg + 256]).max())
