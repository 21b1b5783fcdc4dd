#!/bin/bash
# The trainer on a real GPU, past bench/gpu_smoke.py: `bash bench/gpu_checks.sh` from the repository root on a
# machine with one or more NVIDIA GPUs (logs go to $OUT, default /tmp/gpu-checks). Figures and what was seen:
# bench/RESULTS.md, "The trainer on a GPU". ROWS sets the dataset size (400,000 rows × 32 features by default).
# Name checks to run only those (`bash bench/gpu_checks.sh smoke resume serve`); by default all of them, in order:
CHECKS=${*:-smoke two-ranks too-many resume streamed classification predict serve}
want() { [[ " $CHECKS " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpu-checks}; W=/tmp/gpu-checks-work; rm -rf $W; mkdir -p $OUT $W
RUN="--batch-size 1024 --log-every-steps 20"
summary() { python3 - "$@" <<'PY'
import json, sys
keep = {"training starts": ("world_size", "device"), "dataset loaded": ("mode", "train_rows"),
        "dataset streamed": ("rows", "budget_mb"), "training rows streamed": ("window_rows", "train_rows"),
        "resumed from checkpoint": ("step", "epoch"), "evaluation": ("epoch", "val_rmse", "val_accuracy"),
        "training finished": ("task", "val_rmse", "val_accuracy", "steps", "samples_per_second")}
for path in sys.argv[1:]:
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            if "Error" in line: print("   ", path.split("/")[-1], line.strip()[:240])
            continue
        if r.get("message") in keep or r.get("severity") in ("WARNING", "ERROR"):
            print("   ", path.split("/")[-1], r.get("severity"), r.get("message")[:300], {k: r.get(k) for k in keep.get(r.get("message"), ())})
PY
}
echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; df -h /dev/shm | tail -1; nproc
python3 -c "import sys,torch,numpy,pyarrow; print(sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'nccl',torch.cuda.nccl.version() if torch.cuda.is_available() else None,'numpy',numpy.__version__,'pyarrow',pyarrow.__version__)"
want smoke && { echo "== bench/gpu_smoke.py"; timeout 200 python3 bench/gpu_smoke.py --keep $W/smoke; echo "rc $?"; }
want two-ranks && { echo "== two NCCL ranks on one GPU, without the trainer"
timeout 60 torchrun --standalone --nproc-per-node 2 bench/gpu_two_ranks.py 2>&1 | grep -E "^rank|Duplicate" | head -4; echo "rc ${PIPESTATUS[0]}"; }
python3 - <<'PY'
import os, numpy as np, pyarrow as pa, pyarrow.parquet as pq
r = np.random.default_rng(1); x = r.normal(size=(int(os.environ.get("ROWS", "400000")), 32)).astype("float32")
cols = {f"x{i}": x[:, i] for i in range(32)}
pq.write_table(pa.table({**cols, "y": x[:, 0] - 2 * x[:, 1] + np.sin(x[:, 2])}), "/tmp/gpu-checks-work/reg.parquet")
pq.write_table(pa.table({**cols, "label": np.where(x[:, 0] + x[:, 1] > 0, "up", "down")}), "/tmp/gpu-checks-work/cls.parquet")
PY
folders() { echo "--model-dir $W/$1/m --checkpoint-dir $W/$1/c --tensorboard-dir $W/$1/l"; }
want too-many && { echo "== --nproc-per-node above the GPU count: refused before torchrun"
timeout 60 python3 -m trainer.launch --nproc-per-node 9 --data $W/reg.parquet --target y $(folders two) > $OUT/two.log 2>&1; echo "rc $?"; summary $OUT/two.log; }
want resume && { echo "== one epoch with --compile, then resumed to three"
timeout 110 python3 -m trainer.launch --data $W/reg.parquet --target y $RUN --compile $(folders r) --epochs 1 > $OUT/resume1.log 2>&1; echo "rc $?"
timeout 110 python3 -m trainer.launch --data $W/reg.parquet --target y $RUN --compile $(folders r) --epochs 3 > $OUT/resume2.log 2>&1; echo "rc $?"
summary $OUT/resume1.log $OUT/resume2.log
python3 -c "import json; m=json.load(open('$W/r/m/metrics.json')); print('    metrics.json', {k: m.get(k) for k in ('resumed_from_step','steps','steps_run','steps_kept','process_started','first_step','world_size')})"
cat $W/r/c/progress.json $W/r/m/progress.json 2>/dev/null | head -2; }
want streamed && { echo "== streamed: --memory-budget-mb 24"
timeout 150 python3 -m trainer.launch --data $W/reg.parquet --target y $RUN --epochs 2 --memory-budget-mb 24 $(folders s) > $OUT/streamed.log 2>&1; echo "rc $?"; summary $OUT/streamed.log; }
want classification && { echo "== classification"
timeout 120 python3 -m trainer.launch --data $W/cls.parquet --target label $RUN --epochs 2 $(folders k) > $OUT/cls.log 2>&1; echo "rc $?"; summary $OUT/cls.log; }
want predict && { echo "== trainer.predict with the classifier"
timeout 90 python3 -m trainer.predict --model-dir $W/k/m --data $W/cls.parquet --out $W/p.parquet > $OUT/predict.log 2>&1; echo "rc $?"
python3 -c "import pyarrow.parquet as pq; t=pq.read_table('$W/p.parquet'); print(t.num_rows, 'rows; agreement with the label', sum(a==b for a,b in zip(t['label'].to_pylist(), t['prediction'].to_pylist()))/t.num_rows)"; }
want serve && { echo "== trainer.serve with no GPU visible, the GPU-trained models (a CPU serving node)"
for m in r k; do data=$W/$([ $m = r ] && echo reg || echo cls).parquet
  if [ -f $W/$m/m/model.pt ]; then timeout 120 python3 bench/gpu_serve_check.py $W/$m/m $data; echo "rc $?"
  else echo "    no model in $W/$m/m: name resume or classification before serve"; fi; done; }
