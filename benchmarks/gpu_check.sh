#!/usr/bin/env bash
# The device check of GPU training, prepared to run as it is on the offline GPU machine (../shared/notes/gpu-device.md:
# Python 3.12 and torch there, no snakemake, no jsonschema, posym not installed, no network), in stages, the most
# valuable first, each under its own deadline, all within --budget seconds (default 420: 7 minutes):
#   1. tests       the GPU tests (pytest -m gpu): data on the device, no host sync inside a step (sync debug mode),
#                  packed seeds, determinism, resumes (on one device and across CPU and GPU)            deadline 90 s
#   2. throughput  benchmarks/train_throughput.py: posym, posym with 5 seeds packed and HF GPTJForCausalLM + AdamW,
#                  in float32 and under bfloat16 autocast, in one process                               deadline 120 s
#   3. workflow    one task-seed of the paper config (config.yaml: number, seed 0) trained and evaluated by the
#                  workflow (Snakemake), with its checkpoints, in a scratch folder                       deadline 240 s
# A stage gets its deadline (--deadline STAGE=SECONDS sets another) or what is left of the budget, whichever is less;
# one that fails or runs out of time is recorded as such and the next one runs; one with under 5 s left is skipped.
# Then benchmarks/gpu_check_summary.py writes gpu_check_<device>.json.
#
#   bash benchmarks/gpu_check.sh [--device cuda|cpu] [--size paper|min] [--out DIR] [--scratch DIR]
#                                [--budget SECONDS] [--stages tests,throughput,workflow] [--deadline STAGE=SECONDS]
#                                [--wheels DIR]
#
# --out gets at most 8 flat files: gpu_check_<device>.json (the summary: each stage's status and time, the GPU tests'
# counts, the throughput, the end-to-end job, and the lines the report shows), train_throughput_<device>.json,
# gpu_tests.xml, and the logs setup.log, gpu_tests.log, throughput.log, workflow.log (Snakemake's) and jobs.log (the
# workflow's job logs). Default: <scratch>/out. The check writes nothing that is committed: to show a GPU run in the
# report (paper A's Table 4 and the performance section), copy gpu_check_cuda.json and train_throughput_cuda.json
# into benchmarks/results/ and commit them (docs/gpu.md).
# --size min trains and benchmarks tests/configs/tiny.yaml's model instead (a few minutes on a CPU) to check the
# script itself; tests/workflow/test_benchmarks.py runs it so, end to end.
# Python: $PYTHON, else .venv/bin/python where there is one, else python3. posym is this repository's (PYTHONPATH
# workflow/; the workflow's `posym` command is a shim in <scratch>/bin). An interpreter without snakemake or jsonschema
# gets them from the wheel folder (default .whl/, built by benchmarks/device_wheels.py), installed into
# <scratch>/site with pip --no-index --target.
#
# On the GPU machine, through the device tool's `run`, once `python benchmarks/device_wheels.py build` has filled .whl/
# here (the budget leaves a session's 15 minutes of device time room for a rerun of one stage: docs/gpu.md):
#   run(command="bash benchmarks/gpu_check.sh --device cuda --out $OUT", carry=[".whl"], timeout_s=480)
#   run(command="bash benchmarks/gpu_check.sh --device cuda --out $OUT --stages workflow --budget 280", carry=[".whl"], timeout_s=300)
set -euo pipefail

# Each stage's own deadline, in the order they run (the most valuable first).
declare -A deadline=([tests]=90 [throughput]=120 [workflow]=240)
order=(tests throughput workflow)
device=cuda
size=paper
out=""
scratch=""
budget=420
stages=tests,throughput,workflow
wheels=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --device) device="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --scratch) scratch="$2"; shift 2 ;;
        --budget) budget="$2"; shift 2 ;;
        --stages) stages="$2"; shift 2 ;;
        --wheels) wheels="$2"; shift 2 ;;
        --deadline)
            [[ "$2" =~ ^(tests|throughput|workflow)=([0-9]+)$ ]] || { echo "gpu_check.sh: --deadline takes STAGE=SECONDS (tests, throughput or workflow), not $2" >&2; exit 2; }
            deadline[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$device" == cuda || "$device" == cpu ]] || { echo "gpu_check.sh: --device cuda or cpu, not $device" >&2; exit 2; }
[[ "$size" == paper || "$size" == min ]] || { echo "gpu_check.sh: --size paper or min, not $size" >&2; exit 2; }
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --budget is whole seconds, not $budget" >&2; exit 2; }
IFS=, read -r -a chosen <<< "$stages"
for stage in "${chosen[@]}"; do
    [[ "$stage" =~ ^(tests|throughput|workflow)$ ]] || { echo "gpu_check.sh: --stages names tests, throughput or workflow, not $stage" >&2; exit 2; }
done
# What the summary needs after the last stage, kept back from the budget.
reserve=15

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
started=$(date +%s)
scratch="${scratch:-results/gpu_check/$device-$size}"
# A fresh scratch folder: a workflow that finds its outputs would train nothing and time nothing.
rm -rf "$scratch"
mkdir -p "$scratch"
scratch="$(cd "$scratch" && pwd)"
out="${out:-$scratch/out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -f "$out"/{gpu_check_$device.json,train_throughput_$device.json,gpu_tests.xml,setup.log,gpu_tests.log,throughput.log,workflow.log,jobs.log}
stage_file="$scratch/stages.tsv"
: > "$stage_file"

# ---------------------------------------------------------------- setup: posym and the workflow's packages, no install
export PYTHONPATH="$repo/workflow"
export PYTHONUNBUFFERED=1
{
    echo "python: $PYTHON ($("$PYTHON" --version 2>&1))"
    if ! "$PYTHON" -c 'import snakemake, jsonschema' 2>/dev/null; then
        wheels="${wheels:-$repo/.whl}"
        echo "snakemake or jsonschema missing: installing the wheels of $wheels into $scratch/site"
        "$PYTHON" benchmarks/device_wheels.py check --dir "$wheels"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$scratch/site" "$wheels"/*.whl
        # Before the interpreter's own site-packages: the pinned packaging (25.0) over a newer one snakemake refuses.
        export PYTHONPATH="$repo/workflow:$scratch/site"
    fi
    # The workflow's jobs run `posym`: this repository's, through the interpreter chosen here.
    mkdir -p "$scratch/bin"
    printf '#!%s\nimport sys\nfrom posym.cli import main\nsys.exit(main())\n' "$PYTHON" > "$scratch/bin/posym"
    chmod +x "$scratch/bin/posym"
    "$PYTHON" -c 'import posym, snakemake, jsonschema, torch; print("posym", posym.__file__); print("snakemake", snakemake.__version__); print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
    command -v nvidia-smi > /dev/null && nvidia-smi -L || true
} > "$out/setup.log" 2>&1 || { cat "$out/setup.log" >&2; echo "gpu_check.sh: setup failed (log: $out/setup.log)" >&2; exit 1; }
export PATH="$scratch/bin:$PATH"
if [[ "$device" == cuda ]] && ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "gpu_check.sh: --device cuda, but torch sees no CUDA device (use --device cpu)" >&2
    exit 2
fi

# ---------------------------------------------------------------- the stages
# run_stage NAME LOG COMMAND...: COMMAND under NAME's deadline (or what is left of the budget), its output to LOG,
# one line "name status exit seconds deadline" to the stage file.
run_stage() {
    local name="$1" log="$2" left limit rc=0 begin ms status
    shift 2
    left=$(( budget - reserve - ($(date +%s) - started) ))
    if (( left < 5 )); then
        echo "== $name: skipped, the budget of $budget s is spent"
        printf '%s\tskipped\t\t0\t0\n' "$name" >> "$stage_file"
        return
    fi
    limit=$(( deadline[$name] < left ? deadline[$name] : left ))
    echo "== $name (deadline $limit s)"
    begin=$(date +%s%N)
    timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1 || rc=$?
    ms=$(( ($(date +%s%N) - begin) / 1000000 ))
    case $rc in
        0) status=passed ;;
        124|137) status=timed_out ;;  # timeout's TERM, or its KILL 10 s later
        5) if [[ $name == tests ]]; then status=no_tests; else status=failed; fi ;;  # pytest: no test carries the mark
        *) status=failed ;;
    esac
    printf '%s\t%s\t%s\t%d.%03d\t%s\n' "$name" "$status" "$rc" $((ms / 1000)) $((ms % 1000)) "$limit" >> "$stage_file"
    echo "   $status (exit $rc); log: $log"
}

workflow_dir="$scratch/workflow"
for stage in "${order[@]}"; do
    [[ ",$stages," == *",$stage,"* ]] || continue
    case $stage in
        tests)
            run_stage tests "$out/gpu_tests.log" "$PYTHON" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml "$out/gpu_tests.xml"
            ;;
        throughput)
            if [[ "$size" == paper ]]; then
                # GPU steps take tens of milliseconds (host-bound: 48-55 ms for posym on the H200, 2026-12-04): blocks of
                # 20 steps keep the clock's and the synchronisation's share small, and 3 rounds of 6 contenders fit.
                if [[ "$device" == cuda ]]; then blocks=(--rounds 3 --steps 20); else blocks=(--rounds 5 --steps 8); fi
            else
                blocks=(--rounds 1 --steps 1 --size min --no-compiled)  # checks the script: no compiling
            fi
            run_stage throughput "$out/throughput.log" "$PYTHON" benchmarks/train_throughput.py --device "$device" --packed 5 \
                "${blocks[@]}" --out "$out/train_throughput_$device.json"
            ;;
        workflow)
            # The check's own settings over config.yaml (and over tests/configs/tiny.yaml's sizes at --size min).
            # config.yaml is named explicitly: in another working directory the Snakefile's own
            # `configfile: "config.yaml"` is not found and, with --configfile given, silently skipped.
            configs=("$repo/config.yaml")
            [[ "$size" == min ]] && configs+=("$repo/tests/configs/tiny.yaml")
            printf 'studies: [a]\na:\n  tasks: [number]\n  seeds: [0]\n  train:\n    device: %s\n' "$device" > "$scratch/gpu_check.yaml"
            configs+=("$scratch/gpu_check.yaml")
            mkdir -p "$workflow_dir"
            # The greedy scheduler: the ILP one needs pulp, which is not carried. Targets before --configfile: it
            # takes every word that follows.
            run_stage workflow "$out/workflow.log" "$PYTHON" -m snakemake -s "$repo/Snakefile" --directory "$workflow_dir" \
                --cores all --scheduler greedy results/a/eval/main/number/seed0/test.csv --configfile "${configs[@]}"
            # The jobs' own logs, in one file (their tails: a failed job says why at its end).
            if [[ -d "$workflow_dir/logs" ]]; then
                find "$workflow_dir/logs" -type f -name '*.log' | sort | while read -r log; do
                    echo "==> ${log#"$workflow_dir"/} <=="
                    tail -n 200 "$log"
                done > "$out/jobs.log"
            fi
            ;;
    esac
done

# ---------------------------------------------------------------- the summary
echo "== summary"
"$PYTHON" benchmarks/gpu_check_summary.py --device "$device" --size "$size" --scratch "$scratch" --out "$out" \
    --budget "$budget" --started "$started"
