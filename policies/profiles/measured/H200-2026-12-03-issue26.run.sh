#!/usr/bin/env bash
# issue 26 device run: TP GEMMs at sharded shapes, rank rest work, Ulysses packing, GQA, backends (u1..u8).
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export TORCHINDUCTOR_COMPILE_THREADS=16
L="$O/H200-2026-12-03-issue26.device-log.txt"
exec > >(tee -a "$L") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv
python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))' || { echo "NO TORCH"; exit 3; }
timeout 40 python3 -m pip install -q --no-index --no-deps --target /tmp/site "$D"/fa3_fwd-0.0.3-*.whl || echo "fa3 install failed"
export PYTHONPATH=/tmp/site
python3 -c 'import fa3_fwd_interface as f; print("fa3", f.__file__)' || echo "fa3 not importable"
M="python3 $D/instruments/mechbench.py --sizes $D/sizes.json"
sec() { local t=$1 name=$2; shift 2; echo "== [$(date -u +%T)] section $name (timeout $t s)"; timeout "$t" $M "$@" --out "$O/H200-1gpu-2026-12-03.mechbench-$name.json"; echo "== rc=$? [$(date -u +%T)] $name"; }
sec 130 tp --sections tp
sec 50 ulysses-gqa --sections ulysses,gqa
sec 110 backends --sections backends
sec 190 rank --sections rank
date -u
