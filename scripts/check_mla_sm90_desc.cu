// Host-only check (no GPU): the wgmma shared-memory descriptors mla_decode_sm90.cu builds by hand
// (Desc / DescKMajor / DescV) vs CuTe's make_gmma_desc for the same layouts (K-major 128B-swizzle
// Q/K boxes; MN-major V: 64-column atoms 8192 B apart, 8-key groups 1024 B apart). The start
// address is not computable on the host (CuTe prints an error for it) and is masked out.
//   nvcc -std=c++20 --expt-relaxed-constexpr -Ithird_party/cutlass/include scripts/check_mla_sm90_desc.cu -o /tmp/c && /tmp/c
#include <cstdio>
#include <cstdint>
#include "cute/tensor.hpp"
#include "cute/atom/mma_traits_sm90_gmma.hpp"
using namespace cute;
static uint32_t SwzOff(int r, int c) { return r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2; }
static uint64_t Desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}
int main() {
  int bad = 0;
  // K-major: [64 rows x 64 cols] box, Layout_K_SW128_Atom tiled over 64 rows.
  auto lk = tile_to_shape(GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>{}, Shape<_64, _64>{});
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c)
      (void)lk;  // the swizzle is applied by the smem pointer, not by evaluating the layout
  // MN-major V slice: element (n, k), n < 256 value columns (4 boxes of 64), k < 16 keys:
  // ours: box n/64 at 4096 elements, key k row inside it.
  auto atom = GMMA::Layout_MN_SW128_Atom<cutlass::bfloat16_t>{};  // (64 x 8)
  auto lmn = tile_to_shape(atom, Shape<_256, _16>{}, Step<_2, _1>{});  // K first? check both orders
  auto lmn2 = tile_to_shape(atom, Shape<_256, _16>{}, Step<_1, _2>{});
  int bad1 = 0, bad2 = 0;
  for (int n = 0; n < 256; ++n)
    for (int k = 0; k < 16; ++k) {
      const uint32_t ours = (n / 64) * 8192 + SwzOff(k, n % 64);
      if (lmn(n, k) * 2 != (int)ours) bad1++;
      if (lmn2(n, k) * 2 != (int)ours) bad2++;
    }
  (void)bad1; (void)bad2;
  // Descriptors (smem pointer at a fake 1024-aligned shared address).
  using T = cutlass::bfloat16_t;
  T* base = reinterpret_cast<T*>(uintptr_t(0x4000));
  {
    auto tf = make_tensor(make_smem_ptr(base), tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<_64, _64>{}));
    auto t = flat_divide(tf, Shape<_64, _16>{})(_, _, 0, 0);
    GmmaDescriptor d = GMMA::make_gmma_desc<GMMA::Major::K>(t);
    printf("K-major cute desc %016llx ours %016llx\n", (unsigned long long)d.desc_, (unsigned long long)Desc(0x4000, 16, 1024));
    if ((d.desc_ & ~uint64_t{0x3FFF}) != (Desc(0x4000, 16, 1024) & ~uint64_t{0x3FFF})) bad++;  // start: host-uncomputable
  }
  {
    auto t = make_tensor(make_smem_ptr(base), lmn);
    auto t2 = make_tensor(make_smem_ptr(base), lmn2);
    GmmaDescriptor d2 = GMMA::make_gmma_desc<GMMA::Major::MN>(t2);
    printf("MN-major (MN-first order) cute desc %016llx\n", (unsigned long long)d2.desc_);
    // Our exact V layout: MN atoms of 64 columns 4096 elements (8192 B) apart, 8-key groups 512
    // elements (1024 B) apart, the 128-byte swizzle.
    auto lours = make_composed_layout(Swizzle<3, 4, 3>{}, smem_ptr_flag_bits<16>{}, Layout<Shape<Shape<_64, _4>, Shape<_8, _2>>, Stride<Stride<_1, _4096>, Stride<_64, _512>>>{});
    auto to = make_tensor(make_smem_ptr(base), lours);
    GmmaDescriptor d3 = GMMA::make_gmma_desc<GMMA::Major::MN>(to);
    const uint64_t mask = ~uint64_t{0x3FFF};  // start address: not computable on the host
    printf("MN-major our layout: cute desc %016llx ours %016llx -> %s\n", (unsigned long long)d3.desc_,
           (unsigned long long)Desc(0x4000, 8192, 1024), (d3.desc_ & mask) == (Desc(0x4000, 8192, 1024) & mask) ? "fields match" : "MISMATCH");
    if ((d3.desc_ & mask) != (Desc(0x4000, 8192, 1024) & mask)) bad++;
    GmmaDescriptor d = GMMA::make_gmma_desc<GMMA::Major::MN>(t);
    printf("MN-major cute desc %016llx ours %016llx\n", (unsigned long long)d.desc_, (unsigned long long)Desc(0x4000, 8192, 1024));
    (void)d;  // (K-first tiling: a different layout than ours; printed for the LBO/SBO roles)
  }
  printf("%s (bad=%d)\n", bad == 0 ? "OK: LBO / SBO / swizzle fields as CuTe's make_gmma_desc" : "MISMATCH", bad);
  return bad != 0;
  return 0;
}
