set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
export OUT=$R
for a in "b1 32K" "h128 b128 4K"; do
  tag=v10_$(echo $a | tr ' ' '_')
  DS_BENCH_MLA_ANCHOR="$a" DS_BENCH_SM90_VARIANTS=10 DS_BENCH_SM90_BALANCED=none NCU_SKIP=5 NCU_TIMEOUT_S=150 bash -c ". scripts/ncu_common.sh; ncu_source MlaDecodeSm90Wg3Kernel $tag -- --only mla_sm90 --budget-s 30; gzip -c /tmp/ncu_src_$tag.csv > $R/ncu_src_$tag.csv.gz; grep -iE 'stall|warp cycles|issued' /tmp/ncu_src_$tag.log | head -5"
  echo "ncu $a rc=$? $(( $(date +%s) - T0 ))s"; head -60 $R/ncu_${tag}_source_top.txt | tail -25
done
DS_BENCH_MLA_ANCHOR="h128 b128 4K" DS_BENCH_SM90_VARIANTS=10 DS_BENCH_SM90_BALANCED=none NCU_SKIP=5 bash -c ". scripts/ncu_common.sh; ncu_sections MlaDecodeSm90Wg3Kernel v10_sections -- --only mla_sm90 --budget-s 30"
grep -E "Stall|No Instruction|Warp Cycles|Issue Slot|Executed Ipc|Duration|SM Frequency" $R/ncu_v10_sections.txt | head -40
cd $(dirname $R) && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
