# call 1: ZeRO-3 with decoder layers as DeepSpeed leaf modules (new) vs HEAD (old) vs raw Lightning; then offload
END=${END:-575}
source .gpu/prefix.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/nvidia-smi.txt
GS="python3 benchmarks/gpu_strategies.py --strategies zero3"
step 75 $OLD z3old1 $GS --out /tmp/w/z3 --no-raw --tag base1
step 230 $NEW z3leaf $GS --out /tmp/w/z3 --rounds 2 --tag leaf
step 75 $OLD z3old2 $GS --out /tmp/w/z3 --no-raw --tag base2
step 150 $NEW offl python3 benchmarks/gpu_strategies.py --strategies zero3_offload --out /tmp/w/off --no-raw --warmup 2 --steps 5 --grad-accum 8 --tag leaf_ga8
for d in z3 off; do [ -f /tmp/w/$d/gpu_strategies.json ] && cp /tmp/w/$d/gpu_strategies.json $OUT/$d.json && cat /tmp/w/$d/gpu_strategies.md; done
mkdir -p $OUT/logs; cp /tmp/w/*/*.log $OUT/logs/ 2>/dev/null; echo total $(el)s
# call 2: ratios vs raw Lightning with today's defaults (liger kernels on GPU), ABBA
END=${END:-570}
source .gpu/prefix.sh
for s in ddp fsdp zero2; do
  step 150 $NEW ab_$s python3 benchmarks/gpu_strategies.py --strategies $s --out /tmp/w/ab --rounds 2
done
[ -f /tmp/w/ab/gpu_strategies.json ] && cp /tmp/w/ab/gpu_strategies.json $OUT/ab.json && cat /tmp/w/ab/gpu_strategies.md; echo total $(el)s
# call 3: zero3 (leaf layers) vs raw again; zero3_offload vs raw offload; CPU Adam with 4 OpenMP threads
END=${END:-470}
source .gpu/prefix.sh
step 150 $NEW z3b python3 benchmarks/gpu_strategies.py --strategies zero3 --out /tmp/w/z3b --rounds 2 --tag leaf2
step 170 $NEW offraw python3 benchmarks/gpu_strategies.py --strategies zero3_offload --out /tmp/w/offraw
step 110 $NEW offomp4 env OMP_NUM_THREADS=4 python3 benchmarks/gpu_strategies.py --strategies zero3_offload --out /tmp/w/off4 --no-raw --warmup 2 --steps 5 --grad-accum 8 --tag omp4_ga8
for d in z3b offraw off4; do [ -f /tmp/w/$d/gpu_strategies.json ] && cp /tmp/w/$d/gpu_strategies.json $OUT/$d.json && cat /tmp/w/$d/gpu_strategies.md; done; echo total $(el)s
# call 4: SDPA backend under Liger (plain loop), and pinned memory off for ZeRO-3 offload at the selector's batch
END=${END:-330}
source .gpu/prefix.sh
L="python3 benchmarks/gpu_levers.py --liger --compile none"
for a in default flash efficient default; do
  left=$(( END - $(el) )); [ $left -lt 60 ] && break
  PYTHONPATH=$NEW timeout $((left-5)) $L --attention $a --tag att_$a 2>&1 | grep '^{' | tee -a $OUT/att.jsonl
done
step 110 $NEW nopin python3 benchmarks/gpu_strategies.py --strategies zero3_offload --out /tmp/w/nopin --no-raw --warmup 2 --steps 5 --grad-accum 8 --tag nopin_ga8 --extra=--deepspeed-config=.gpu/nopin.json
[ -f /tmp/w/nopin/gpu_strategies.json ] && cp /tmp/w/nopin/gpu_strategies.json $OUT/nopin.json && cat /tmp/w/nopin/gpu_strategies.md; grep -i "error" /tmp/w/nopin/*.log | tail -3; echo total $(el)s
