// The MoE layer for one decode token on a TMA ring (session 32; docs/design/decode_small_batch.md,
// "Session 32: the MoE layer on a TMA ring"): the same layer, the same sums in the same order and
// so the same bits as MoePersistent's runner form (MoePersistentTagged: the post-attention norm
// folded in, the router, the tagged routing, the shared experts' gate_up tiles first, gu_ksplit 8,
// no next norm), but with the expert weights streamed into a shared-memory ring by 2-d / 3-d
// tensor-map copies (TMA) instead of register bursts.
//
// Why: a warp's bytes in flight in MoePersistent are its registers (8 KB a burst at 128 registers),
// so that kernel streams in bursts that drain between rounds and at its grid barrier; V2-Lite's
// layer took ~42 us for 138.9 MB (33 us at the read rate). Here one block a SM has a ring of
// `stages` x 32 KB in flight whatever its warps do, and its producer warps keep filling it across
// the rounds, the routing and the grid barrier (the down rows need only the routed ids, not act).
// The probe (CudaStreamRing.DISABLED_RingReport, session 32 run 1): V2-Lite's 138.4 MB through 4
// stages with one grid barrier in 34.9 us, 3.97 TB/s.
//
// Shape (one block a SM, cooperative launch, 8 consumer warps + `producers` producer warps + one
// routing warp):
//  - producers (lane 0 of each) walk the block's schedule and issue, per ring stage, one 4 KB box
//    per consumer warp w with w % producers == j: gate_up tile stages (a tile is 8 gate + the same
//    8 up rows over hidden; warp w's slice is half h of its K eighth: gate and up rows x 128
//    columns in one 3-d box of [2][8][128]), then down stages (a down tile is 16 output columns,
//    tile grid - 1 - block, then + grid; warp w is segment w: routed slot w < top_k, then the shared
//    experts' down in chunks of I; a stage is 128 columns of the segment's 16 rows, 11 stages);
//  - consumers do MoePersistent's math on the ring's slices (WarpTile16's lane order and mma
//    sequence; a down segment's two K ranges summed apart, as MoePersistent's units do) and its
//    sums and combine, with a grid barrier that only they take between act's writes and its
//    reads (MoeRingForm::act_tagged, the runner's default since session 33: no barrier; act
//    also goes out as tagged words, each warp polls its own segment's words before each down
//    stage, and the routed tiles run chunk-major so that the last rounds make the last stages'
//    act); they issue their first loads (phase 0's and the router's) before the producers start,
//    so that those loads are ahead of the weight stream in the memory system's queues;
//  - the routing warp routes as soon as the router blocks' tagged logits are in (the producers
//    wait for the ids before the first routed stage; the consumers wait for it only after
//    gate_up, before the down stages, which need the ids anyway).
// Ordering without the barrier (act_tagged): a block writes residual columns only after it has
// read every block's act words, and every block's act depends on its own reads of the residual
// (phase 0), so no block's residual write can precede another's reads of it (the data
// dependency; the same reasoning as the router's tagged logits).
// Shapes: DeepSeek-V2-Lite's MoE (and Moonlight's): hidden 2048, 64 routed experts, top 6, I 1408,
// shared I 2816, bf16 experts (MoeRingUnsupported says why not).
// The dense form (session 34; params with num_experts == top_k == 0, MoePersistent's dense form:
// the first_k_dense layer's MLP as shared_gu / shared_down, shared_inter its I): V2-Lite's dense layer
// (hidden 2048, I 10,944), act_tagged only. Its gate_up tiles are MoePersistent's; a down tile's K is 86
// chunks of 128 columns (the last 64 wide), chunk 8 ds + w warp w's part of stage ds, each warp's sum
// over its chunks in order (its stages before and after the MoE form's K split summed apart, d0 then d1),
// the warps' sums in warp order: its own fp32 order, so bounded against MoePersistent's dense form, not
// bit-identical (CudaRunnerPersistentMoe.RingDenseWithinBounds).
// Source of the math: moe_persistent.h (DeepSeek-V2 paper section 2.2; transformers' DeepseekV2MoE).
#pragma once

#include <cuda.h>

#include <string>

#include "backend/cuda/moe_persistent.h"

namespace ds::cuda {

// The layer's tensor maps (host-built once per layer's weights; MoeRingMakeMaps): gu / sgu the
// routed / shared gate_up weights as 3-d [halves][rows][hidden] (box 128 x 8 x 2), dn / sdn the
// routed / shared down weights as 2-d [rows][I or shared I] (box 128 columns x 16 rows).
struct MoeRingMaps {
  CUtensorMap gu, sgu, dn, sdn;
};

// MoeRingForm::act_tagged's words: the layer's act (6 x I + shared I values), two a word.
inline constexpr int kMoeRingActWords = (6 * 1408 + 2816) / 2;

// The ring's form (CudaRunnerOptions::moe_ring_stages / moe_ring_producers).
struct MoeRingForm {
  int stages = 5;     // ring stages of 32 KB (2..6)
  int producers = 2;  // producer warps (1, 2 or 4)
  // Stages in flight before the routing is seen (0: `stages`). Fewer shorten the queues that the
  // routing warp's polls of the router logits wait in.
  int early_stages = 0;
  // The routing warp runs its code once on made-up logits before the producers start (its
  // instructions then come in while the memory system is idle). The same bits.
  bool warm_route = true;
  // The weight copies with an L2 evict_first policy (read once: they leave the L2 to what the next
  // kernels read). The same bits.
  bool evict_first = true;
  // Blocks of the launch (tests: the schedules of smaller GPUs, e.g. blocks with two down tiles
  // below 128); 0: one a SM. At least 88 (16 gate_up rounds a block at most), at most the SMs.
  int grid = 0;
  // act handed over by tagged words instead of the grid barrier (MoeRing's act_tagged argument):
  // each gate_up tile's act also goes into act_tagged as (tag << 32 | two bf16 values) words,
  // the tag the launch's (router_tagged's); a block arrives at the grid counter without waiting,
  // and each consumer warp polls its own segment's words, a down stage waiting only for its 128
  // act values (the tiles that make them may still be in other blocks' rounds). The same bits.
  bool act_tagged = false;
  // act_tagged: a down stage whose act a lane still lacks two stages ahead has its words loaded then
  // (into registers; committed at the stage), not only when the stage is reached. The same bits.
  bool act_lookahead = true;
};

// Empty when MoeRing can run p (MoePersistentTagged's form: attn_out, router_tagged, no
// norm_weight, routed and shared experts; or the dense form above: num_experts == top_k == 0, attn_out,
// no norm_weight, the MLP as shared_gu / shared_down, act_tagged) with `form` on this device; else why not. The params
// carry no dtype: the caller passes bf16 experts (the runner checks). MoePersistent's fields that
// the ring has no use for are ignored: blocks_per_sm, gu_ksplit, l2_fetch, router_ready, partials,
// pdl, specialize (the runner takes the ring only where MoePersistentTagged holds).
std::string MoeRingUnsupported(const MoePersistentParams& p, const MoeRingForm& form);

// The tensor maps of p's w13 / shared_gu / w2 / shared_down (DS_CHECKs the driver's encode).
MoeRingMaps MoeRingMakeMaps(const MoePersistentParams& p);

// Measurement only (tests): with MoePersistentParams::stamps / tile_stamps set (MoePersistent's
// strides, kMoePersistentStamps / kMoePersistentTileStamps a block), %globaltimer (ns) at:
//   stamps: 0 start, 1 the router phase done, 2 routed (the routing warp), 3 the first routed gate_up stage
//   full, 4 gate_up consumed, 5 the grid barrier passed (act_tagged: the arrival), 6 act in shared
//   memory (act_tagged: warp 0's first down stage's), 7 end;
//   tile_stamps (producer 0; 3 a consumer, 4 the routing warp): 0 the routing seen, 1 the last
//   gate_up stage issued, 2 the last down stage issued, 3 the first down stage full, 4 the logits in.
// Launches the layer (cooperative, one block a SM, on p.stream); DS_CHECKs MoeRingUnsupported.
// Writes what MoePersistent's runner form writes: logits, the tagged words, topk_ids / topk_weights
// (block 0), act, residual; advances `sync` by one launch (shareable with MoePersistent's).
// barriers_only is refused. Returns the carveout applied (percent; -1: the driver's: p.carveout < 0, or the ring does not fit it).
// act_tagged (form.act_tagged; ignored otherwise): [kMoeRingActWords] 64-bit words, 8-byte aligned,
// zeroed together with p.sync (a word's tag must differ from the launch's until it writes it; every
// launch rewrites every word), e.g. beside router_tagged. DS_CHECKs it.
int MoeRing(const MoePersistentParams& p, const MoeRingMaps& maps, const MoeRingForm& form,
            uint64_t* act_tagged = nullptr);

}  // namespace ds::cuda
