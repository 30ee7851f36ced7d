set -uo pipefail
T0=$(date +%s)
R=$OUT/c10; . scripts/gpu_call_setup.sh
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
NCU=/usr/local/cuda/bin/ncu
for cfg in def ring; do
  if [ $cfg = ring ]; then export DS_MOE_RING=1; else unset DS_MOE_RING; fi
  timeout 200 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:"Persistent|MoeRing|LmHead" \
    $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len 4096 --output-len 3 \
    > $R/ncu_${cfg}_4k.csv 2> $R/ncu_${cfg}_4k_stderr.txt
  echo "ncu $cfg rc=$? $(( $(date +%s) - T0 ))s"
done
unset DS_MOE_RING
python3 bench/ncu_summary.py $R/ncu_def_4k.csv > $R/ncu_def_4k_summary.txt 2>&1
python3 bench/ncu_summary.py $R/ncu_ring_4k.csv > $R/ncu_ring_4k_summary.txt 2>&1
for cfg in def ring; do echo "== $cfg"; sed -n 1,14p $R/ncu_${cfg}_4k_summary.txt | cut -c1-120; done
ob def_4k "$V2 --input-len 4096"
ob ring42_4k "$V2 --input-len 4096" DS_MOE_RING=1
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
echo "total $(( $(date +%s) - T0 ))s"
