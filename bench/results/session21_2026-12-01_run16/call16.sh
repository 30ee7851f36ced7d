set -uo pipefail
R=/tmp/c16; . scripts/gpu_call_setup.sh
T0=$(date +%s)
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER > $R/smi_q_before.txt 2>&1
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
SAMPLE_MS=20 bash .carry/gpu_clock_trace.sh $R/trace_v2 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 512 --output-file $R/ob_v2.json
echo "rc=$? $(grep -E 'median step' $R/trace_v2.log | head -1)"
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER > $R/smi_q_after.txt 2>&1
awk -F', ' '{print $2, $3, $4, $6}' $R/trace_v2.smi.csv | sort | uniq -c | sort -rn | head -12
grep -E "Max Clocks|SM  |Memory  |Applications|Default Applications|Clocks Event|Power Limit" -A0 $R/smi_q_before.txt | head -20
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call16.tgz .
