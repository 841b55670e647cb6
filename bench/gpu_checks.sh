#!/usr/bin/env bash
# The GPU checks, as one short call on a lent device machine (not a test; CI never runs it).
#
#   1. `score` of the four demo cells with the fast protocol on the GPU (the results store
#      comes back, to set against the CPU's `--protocol reference` numbers of the same cells);
#   2. `train` of a demo cell on the GPU (the checkpoint comes back, for `verify` and `score`
#      on the CPU);
#   3. the slot sweep (bench/gpu_sweep.py): live env-steps/s, utilisation, peak memory;
#   4. the release at trained-policy lengths (bench/synthetic_release.py --at-cap: episodes
#      that run to the cap, the whole release's time projected);
#   5. the cold first call of `score`, accounted (bench/cold_call.py, one cold process).
# PARTS (default "score train sweep atcap cold") picks some; SLOTS, SWEEP_S, ATCAP_S,
# ATCAP_DIFFICULTIES and COLD_S tune them.
#
# The machine runs its own image's jax (not the pin), so each part sets the release's PRNG
# mode. Prepare here, in the repo root:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux2014_x86_64 -d .whl alem-env==0.1.0
#   cp .venv/lib/python3.11/site-packages/alem/alem_coop/assets/texture_cache.pbz2 .whl/
# (the texture cache saves alem-env's two-minute first import), then run with `.whl`
# carried: `bash bench/gpu_checks.sh` (writes under $OUT, else ./gpu-checks).
set -u
OUT="${OUT:-gpu-checks}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/alem_env-*.whl || exit 1
cp .whl/texture_cache.pbz2 /tmp/site/alem/alem_coop/assets/ 2>/dev/null
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 ALEM_EVAL_CACHE=/tmp/aec
export JAX_THREEFRY_PARTITIONABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import jax, flax, orbax.checkpoint as o; print(jax.__version__, flax.__version__, \
o.__version__ if hasattr(o, '__version__') else '?', jax.devices())" | tee -a "$OUT/gpu.txt"

want() { [[ " ${PARTS:-score train sweep atcap cold} " == *" $1 "* ]]; }

part() {  # part NAME SECONDS CMD...: time-limited, its log under $OUT, never stops the rest
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -k 15 "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/gpu.txt"
  tail -n 4 "$OUT/$name.log"
}

want score && part score 140 python3 -m alem_eval score 'demo/*' --source demo --episodes 20 --format json
want score && tar czf "$OUT/gpu_results.tgz" -C /tmp/aec results 2>/dev/null
want train && part train 130 python3 -m alem_eval train demo/ippo-rnn/easy/seed0 --source demo \
  --total-timesteps 61440 --out /tmp/gpu-runs --log-every 0
want train && tar czf "$OUT/gpu_trained.tgz" -C /tmp/gpu-runs . 2>/dev/null
want atcap && part atcap "${ATCAP_S:-300}" python3 bench/synthetic_release.py --at-cap \
  --difficulties "${ATCAP_DIFFICULTIES:-hard}" --json "$OUT/at_cap.json"
want cold && part cold "${COLD_S:-150}" python3 bench/cold_call.py --runs 1 --json "$OUT/cold_call.json"
want sweep && part sweep "${SWEEP_S:-280}" python3 bench/gpu_sweep.py --slots "${SLOTS:-800,2400,9600}" \
  --json "$OUT/sweep.json"
exit 0
