set -uo pipefail
T0=$(date +%s)
R=$OUT/c11; . scripts/gpu_call_setup.sh
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob def_4k "$V2 --input-len 4096"
ob ring42_4k "$V2 --input-len 4096" DS_MOE_RING=1
ob ring32_4k "$V2 --input-len 4096" DS_MOE_RING=1 DS_MOE_RING_STAGES=3
ob ring32c_4k "$V2 --input-len 4096" DS_MOE_RING=1 DS_MOE_RING_STAGES=3 DS_MOE_CARVEOUT=-1
ob def_1k "$V2 --input-len 1024"
ob ring32_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_STAGES=3
ob ring42_1k "$V2 --input-len 1024" DS_MOE_RING=1
ob ring32_1k_b "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_STAGES=3
ob def_1k_b "$V2 --input-len 1024"
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
echo "total $(( $(date +%s) - T0 ))s"
