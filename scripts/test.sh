#!/usr/bin/env bash
# Run the whole test suite, with a local SLURM cluster for the SLURM tests.
# Needs the environment .ci/run sets up (.venv with posym[test,slurm]; Debian slurm packages).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

tests/slurm/cluster.sh up
trap 'tests/slurm/cluster.sh down' EXIT
POSYM_SLURM=1 pytest -ra "$@"
