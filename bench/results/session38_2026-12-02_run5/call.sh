set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
export OUT=$R
for a in "h128 b128 4K"; do
  tag=v12_$(echo $a | tr ' ' '_')
  DS_BENCH_MLA_ANCHOR="$a" DS_BENCH_SM90_VARIANTS=12 DS_BENCH_SM90_BALANCED=none NCU_SKIP=5 NCU_TIMEOUT_S=150 bash -c ". scripts/ncu_common.sh; ncu_source MlaDecodeSm90Ring3Kernel $tag -- --only mla_sm90 --budget-s 30; gzip -c /tmp/ncu_src_$tag.csv > $R/ncu_src_$tag.csv.gz"
  echo "ncu $a rc=$? $(( $(date +%s) - T0 ))s"; head -70 $R/ncu_${tag}_source_top.txt
done
DS_BENCH_MLA_ANCHOR="h128 b128 4K" DS_BENCH_SM90_VARIANTS=12 DS_BENCH_SM90_BALANCED=none NCU_SKIP=5 bash -c ". scripts/ncu_common.sh; ncu_sections MlaDecodeSm90Ring3Kernel v12_sections -- --only mla_sm90 --budget-s 30"
grep -E "Stall|No Instruction|Warp Cycles|Issue Slot|Executed Ipc|Duration|SM Frequency|Tensor|Throughput|L1/TEX|Shared" $R/ncu_v12_sections.txt | head -50
cd $(dirname $R) && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
